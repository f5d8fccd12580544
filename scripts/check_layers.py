#!/usr/bin/env python3
"""Fails the build when a runtime layer calls into a layer above it.

Usage (from CMake, after tpu_runtime is built):
    check_layers.py --layer base a.o b.o --layer ir c.o ... --layer stream ...
Layers are given lowest first. For every object file, each undefined symbol
that another object of the runtime defines must be defined in the same layer
or a lower one; otherwise this prints every such reference (file, symbol,
the layer that defines it) and exits 1. Symbols from outside the runtime
(libc, BLAS, oneDNN) are not checked. Uses binutils' nm.
"""
import os
import subprocess
import sys


def parse(argv):
    layers, cur = [], None
    for a in argv:
        if a == "--layer":
            cur = None
        elif cur is None:
            cur = (a, [])
            layers.append(cur)
        else:
            cur[1].append(a)
    return layers


def symbols(objs):
    """{object: (defined, undefined)} from one `nm -A` over every object."""
    table = {o: (set(), set()) for o in objs}
    out = subprocess.run(["nm", "-A", *objs], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        path, _, rest = line.partition(": ")
        if path not in table:
            path, _, rest = line.rpartition(":")
            rest = rest.strip()
        f = rest.split()
        if len(f) == 2 and f[0] == "U":
            table[path][1].add(f[1])
        elif len(f) == 3 and f[1] in "TDBRCGSVW":
            table[path][0].add(f[2])
    return table


def main(argv):
    layers = parse(argv)
    if not layers:
        print("check_layers.py: no layers given", file=sys.stderr)
        return 2
    rank, owner, objs = {}, {}, []
    table = symbols([f for _, files in layers for f in files])
    for i, (name, files) in enumerate(layers):
        rank[name] = i
        for f in files:
            d, u = table[f]
            objs.append((name, f, u))
            for s in d:
                owner[s] = name
    bad = []
    for name, f, undefined in objs:
        for s in sorted(undefined):
            o = owner.get(s)
            if o is not None and rank[o] > rank[name]:
                bad.append(f"  {os.path.basename(f)} (layer {name}) calls {s} (layer {o})")
    if bad:
        order = " < ".join(n for n, _ in layers)
        print(f"runtime layering violated ({order}); a layer may call only itself and lower layers:",
              file=sys.stderr)
        print("\n".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
