"""Two builds of the issue-30 decode loop side by side: strict eager and
DEFER_AND_FUSE.

Each process runs both modes in alternating rounds (100 steps of warm-up,
then `steps` timed), wall and host-thread (time.thread_time) microseconds a
step; processes alternate between the builds (each a directory put on
PYTHONPATH, holding a torch_tpu package). Prints per build and mode the
min and median over all rounds, DEFER_AND_FUSE/strict, and the load
average before and after. Thread settings are the defaults.

Usage: python bench/drift_ab.py BASE_DIR NEW_DIR [repeats 3] [rounds 10] [steps 500]
"""
import json, os, subprocess, sys, time, statistics
if len(sys.argv) > 1 and sys.argv[1] == "--worker":
    import torch, torch_tpu
    rounds, steps = int(sys.argv[2]), int(sys.argv[3])
    from bench_drift import decode_inputs, decode_step  # the loop itself
    q, kc, vc = decode_inputs(torch)
    M = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "defer": torch_tpu.EagerMode.DEFER_AND_FUSE}
    def run(n):
        for step in range(n):
            decode_step(torch, q, kc, vc)  # a host read every step
    res = {m: [] for m in M}
    res.update({m + "_host": [] for m in M})
    for r in range(rounds):
        for m in (M if r % 2 == 0 else list(M)[::-1]):
            with torch_tpu.set_eager_mode(M[m]):
                run(100)
                t, c = time.perf_counter(), time.thread_time(); run(steps)
                res[m].append((time.perf_counter() - t) * 1e6 / steps)
                res[m + "_host"].append((time.thread_time() - c) * 1e6 / steps)
    print(json.dumps(res))
    sys.exit(0)
base, new = sys.argv[1], sys.argv[2]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 500
allr = {b: {"strict": [], "defer": [], "strict_host": [], "defer_host": []} for b in ("base", "new")}
print("load", os.getloadavg())
for rep in range(repeats):
    for b in (("base", "new") if rep % 2 == 0 else ("new", "base")):
        env = dict(os.environ, PYTHONPATH={"base": base, "new": new}[b])
        out = subprocess.run([sys.executable, __file__, "--worker", str(rounds), str(steps)], env=env,
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        for m in r: allr[b][m] += r[m]
        print(b, {m: "%.1f/%.1f" % (min(r[m]), statistics.median(r[m])) for m in r}, flush=True)
print("load", os.getloadavg())
for b, suffix in [(b, x) for x in ("", "_host") for b in allr]:
    s, d = allr[b]["strict" + suffix], allr[b]["defer" + suffix]
    print("%s%s: strict min %.1f med %.1f | defer min %.1f med %.1f | defer/strict min %.3f med %.3f" % (
        b, suffix, min(s), statistics.median(s), min(d), statistics.median(d), min(d) / min(s),
        statistics.median(d) / statistics.median(s)))
