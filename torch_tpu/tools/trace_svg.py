"""A chrome trace from torch.profiler as an SVG timeline, for documentation.

One row per host thread (its ATen ops, outermost first, nested ones drawn
thinner) and one per tpu stream (kernels, fused programs, copies), plus the
stream's DEFER_AND_FUSE flush row; time runs left to right in milliseconds
from the trace's first event. Nothing but the standard library, so a docs
picture can be remade anywhere:

    python examples/profile_gpt.py --steps 1 --trace-dir /tmp/tr
    python -m torch_tpu.tools.trace_svg /tmp/tr/gpt_defer_and_fuse.json out.svg
"""
import argparse
import hashlib
import html
import json

ROW_H = 26
LABEL_W = 190
WIDTH = 1400


def _colour(name):
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
    return f"hsl({h % 360},55%,{58 + (h >> 9) % 20}%)"


def _rows(trace):
    """[(row label, [(start us, duration us, name, depth)])] in display order."""
    names, procs = {}, {}
    for e in trace:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    host, device = {}, {}
    for e in trace:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        key = (e["pid"], e["tid"])
        if e.get("cat") == "cpu_op":
            host.setdefault(key, []).append(e)
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
            device.setdefault(key, []).append(e)
    rows = []
    for key, events in sorted(host.items(), key=lambda kv: -len(kv[1])):
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, spans = [], []
        for e in events:  # nesting depth from containment
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            spans.append((e["ts"], e["dur"], e["name"], len(stack)))
            stack.append(e["ts"] + e["dur"])
        rows.append((names.get(key, f"thread {key[1]}"), spans))
    for key, events in sorted(device.items()):  # by chip (pid), then stream (tid)
        label = names.get(key, f"tpu row {key[1]}")
        if key[0] in procs:  # "TPU 1 stream 0": the chip's process, then its row
            label = f"{procs[key[0]]} {label}"
        rows.append((label,
                     [(e["ts"], max(e["dur"], 0.5), e["name"], 0) for e in events]))
    return rows


def render(trace, title=""):
    rows = _rows(trace)
    starts = [s for _, spans in rows for s, _, _, _ in spans]
    ends = [s + d for _, spans in rows for s, d, _, _ in spans]
    t0, t1 = min(starts), max(ends)
    scale = (WIDTH - LABEL_W - 10) / max(t1 - t0, 1.0)
    height = 40 + ROW_H * len(rows) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="8" y="18" font-size="13">{html.escape(title)}</text>']
    for i, (label, spans) in enumerate(rows):
        y = 30 + i * ROW_H
        out.append(f'<text x="8" y="{y + 16}">{html.escape(label[:34])}</text>')
        out.append(f'<line x1="{LABEL_W}" y1="{y + ROW_H - 2}" x2="{WIDTH - 10}" '
                   f'y2="{y + ROW_H - 2}" stroke="#ddd"/>')
        for start, dur, name, depth in spans:
            if depth > 2:
                continue
            x = LABEL_W + (start - t0) * scale
            w = max(dur * scale, 0.6)
            inset = 3 * depth
            out.append(f'<rect x="{x:.1f}" y="{y + 2 + inset}" width="{w:.1f}" '
                       f'height="{ROW_H - 6 - 2 * inset}" fill="{_colour(name)}">'
                       f'<title>{html.escape(name)} {dur:.1f} us</title></rect>')
            if w > 7 * len(name) and depth == 0:
                out.append(f'<text x="{x + 2:.1f}" y="{y + 16}">{html.escape(name)}</text>')
    axis_y = 30 + ROW_H * len(rows) + 14
    span_ms = (t1 - t0) / 1e3
    step = max(1, round(span_ms / 10))
    for k in range(0, int(span_ms) + 1, step):
        x = LABEL_W + k * 1e3 * scale
        out.append(f'<text x="{x:.1f}" y="{axis_y}">{k} ms</text>')
    out.append("</svg>")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("svg")
    p.add_argument("--title", default="")
    args = p.parse_args()
    with open(args.trace) as f:
        data = json.load(f)
    trace = data["traceEvents"] if isinstance(data, dict) else data
    with open(args.svg, "w") as f:
        f.write(render(trace, args.title))


if __name__ == "__main__":
    main()
