"""The published single-host launcher, for the software TPU:

    python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper script.py [args]
    torchrun --nproc_per_node=N -m torch_tpu._internal.distributed.launchers.singlehost_wrapper script.py [args]

It sets up chips and ranks, then runs ``script.py`` as ``__main__`` with
``sys.argv = [script.py, args...]`` (``-m module`` runs a module instead).

- Ranks: under torchrun they are torchrun's (RANK, WORLD_SIZE, LOCAL_RANK,
  LOCAL_WORLD_SIZE, MASTER_ADDR/PORT). Without it the wrapper makes a
  one-process group: RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1,
  MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, so
  ``init_process_group("tpu_dist")`` works unchanged.
- Chips: as on a published TPU host, each process owns one chip, which it
  sees as ``tpu:0``: ``TPU_VISIBLE_CHIPS=<LOCAL_RANK>`` (torch_tpu's
  CUDA_VISIBLE_DEVICES, see docs/distributed.md). A TPU_VISIBLE_CHIPS or
  TORCH_TPU_NUM_CHIPS already set is kept. At most 8 local ranks (the
  software TPU's chips per host).
- The published wrapper's TORCH_TPU_SLICEBUILDER_ADDRESSES and
  TORCH_TPU_TOPOLOGY mean nothing here and are not set.

The chips are fixed when torch_tpu starts, and ``python -m`` has imported
torch_tpu (a parent package) before this module runs; so when the
environment must change the wrapper re-executes itself once with it (same
pid, so torchrun's agent keeps tracking the process).
"""
import os
import runpy
import socket
import sys

_MARK = "TORCH_TPU_SINGLEHOST_WRAPPER"
_MAX_CHIPS = 8


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_env(environ: dict) -> dict:
    """The variables the wrapper sets (only those not already set)."""
    out = {}
    under_torchrun = "LOCAL_RANK" in environ and "WORLD_SIZE" in environ
    if not under_torchrun:
        defaults = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1"}
        for k, v in defaults.items():
            if k not in environ:
                out[k] = v
        if "MASTER_PORT" not in environ:
            out["MASTER_PORT"] = str(_free_port())
    local_rank = environ.get("LOCAL_RANK", out.get("LOCAL_RANK", "0"))
    if not local_rank.isdigit():
        raise ValueError(f"LOCAL_RANK={local_rank!r} is not a rank")
    if int(local_rank) >= _MAX_CHIPS:
        raise ValueError(f"LOCAL_RANK={local_rank}: the software TPU has {_MAX_CHIPS} chips per "
                         f"host; run at most {_MAX_CHIPS} processes per host")
    if "TPU_VISIBLE_CHIPS" not in environ and "TORCH_TPU_NUM_CHIPS" not in environ:
        out["TPU_VISIBLE_CHIPS"] = local_rank
    return out


def _usage() -> None:
    sys.stderr.write("usage: python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper "
                     "script.py [args...] | -m module [args...]\n")
    sys.exit(2)


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        _usage()
    # As launched: importing torch_tpu (python -m imported it first) maps some
    # variables, e.g. TORCH_TPU_NUM_CHIPS from torchrun's LOCAL_WORLD_SIZE.
    from torch_tpu import _env
    launched = _env.ORIGINAL if _env.ORIGINAL is not None else dict(os.environ)
    changes = plan_env(launched)
    if changes and launched.get(_MARK) != "1":
        env = dict(launched, **changes, **{_MARK: "1"})
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *argv], env)
    if changes:  # re-executed, yet something still differs: a bug, never silently go on
        raise RuntimeError(f"singlehost_wrapper: environment not applied: {changes}")
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = argv[0]
        if not os.path.exists(script):
            raise FileNotFoundError(f"singlehost_wrapper: no such script: {script}")
        sys.argv = [script, *argv[1:]]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
