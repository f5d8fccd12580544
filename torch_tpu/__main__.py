"""``python -m torch_tpu``: an environment report."""
import torch

import torch_tpu
from torch_tpu import _C


def main() -> None:
    gib = 1024 ** 3
    print(f"torch_tpu {torch_tpu.__version__} on torch {torch.__version__}")
    print(f"driver: {_C.driver_name()}, compute threads: {_C.compute_threads()}")
    print(f"accelerator: {torch.accelerator.current_accelerator()}")
    print(f"chips: {torch.tpu.device_count()}")
    for i in range(torch.tpu.device_count()):
        free, total = torch.tpu.mem_get_info(i)
        print(f"  tpu:{i}: {torch.tpu.get_device_name(i)}, memory {total / gib:.1f} GiB, "
              f"free {free / gib:.2f} GiB, allocated "
              f"{torch.tpu.memory_allocated(i) / 2**20:.1f} MiB")
    mxu = torch_tpu.matrix_unit()
    print(f"matrix unit: {mxu['isa']} ({mxu['library']}); bfloat16 GEMMs "
          f"{'on the unit' if mxu['bfloat16'] else 'widened to float32 (OpenBLAS sgemm)'}, "
          f"int8 GEMMs {'on the unit' if mxu['int8'] else 'in an exact int32 loop'}; "
          f"float32 matmul precision {torch.get_float32_matmul_precision()!r}")
    print(f"eager mode: {torch_tpu.get_eager_mode().name}")
    print(f"fallback mode: {_C.fallback_mode()}")
    ops = _C.runtime_ops()
    families = sorted({f for _, f in ops})
    print(f"runtime ops: {len(ops)} in {len(families)} families ({', '.join(families)})")
    print(f"native ATen overloads: {len(torch_tpu.native_ops())}")
    errors = _C.binding_errors()
    if errors:
        print(f"binding errors: {len(errors)}")
        for e in errors:
            print(f"  {e}")
    cache = torch.tpu._get_cache_stats()
    print(f"program cache: {cache.num_entries} programs held, {cache.num_evictions} evicted, "
          f"{cache.num_uncached} not kept (out of host memory)")
    seen = torch_tpu.fallback_counts()
    print(f"fallbacks seen in this process: {sum(seen.values())}")
    print("runtime settings (runtime/include/tpu/config.h; * = set in the environment):")
    for e in _C.runtime_config():
        value = e["value"]
        shown = ("1" if value else "0") if isinstance(value, bool) else f"{value:g}" \
            if isinstance(value, float) else str(value)
        note = f"  [{e['set']!r} is invalid: the default is used]" if e["invalid"] else ""
        print(f"  {'*' if e['set'] is not None else ' '} {e['name']}={shown}{note}: {e['help']}")


if __name__ == "__main__":
    main()
