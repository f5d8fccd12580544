"""The issue-30 decode loop for counting instructions under callgrind.

Instruction counts do not depend on the machine's load, so two builds or
two modes can be compared to a fraction of a percent on a busy machine:
    valgrind --tool=callgrind --instr-atstart=no \\
        python bench/drift_callgrind.py {strict|defer} 200
runs 300 steps of warm-up uncounted, then switches counting on for the
given number of steps (callgrind_control -i on/off on this process); the
"Collected" total over the steps is the cost a step, all threads.
Read the split with callgrind_annotate [--inclusive=yes] callgrind.out.PID.
"""
import os
import sys

import torch

import torch_tpu
from bench_drift import decode_inputs, decode_step  # the loop itself

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
if mode == "defer":
    torch_tpu.set_global_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
q, kc, vc = decode_inputs(torch)


def run(n):
    for _ in range(n):
        decode_step(torch, q, kc, vc)


run(300)
os.system("callgrind_control -i on %d > /dev/null" % os.getpid())
run(steps)
os.system("callgrind_control -i off %d > /dev/null" % os.getpid())
