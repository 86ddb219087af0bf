"""Registers per thread of notebook 02's kernels on this GPU, recorded for machines without one
(``data/kernel_registers_h200.json`` was written by ``--record`` on an H200)."""

import json

from mgpu_helpers import course
from mgpu_helpers.bench import arguments
from mgpu_helpers.measure import gpu_limits


def kernel_registers(n: int = 1 << 20) -> dict:
    """Registers (and local bytes) per thread of notebook 02's kernels (``vec_add`` launched once to compile it)."""
    import cupy as cp
    from numba import cuda

    from mgpu_helpers.lessons import cuda_model, cupy_kernels

    seed = cupy_kernels.raw_kernel(cupy_kernels.SEED_VEC_ADD_SRC, "vecAdd").attributes
    free, bounded = (k.attributes for k in cupy_kernels.many_regs_kernels())
    a, c = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    cuda_model.vec_add[(n + 255) // 256, 256](cuda.as_cuda_array(a), cuda.as_cuda_array(a), cuda.as_cuda_array(c), n)
    cuda.synchronize()
    compiled = {"seed_vecAdd_cupy": seed, "manyRegs": free, "manyRegs_launch_bounds_1024": bounded}
    out = {k: {"registers": at["num_regs"], "local_bytes": at["local_size_bytes"]} for k, at in compiled.items()}
    return out | {"numba_vec_add": {"registers": gpu_limits.numba_regs_per_thread(cuda_model.vec_add)}}


def main(argv: list[str]) -> int:
    """``python -m mgpu_helpers.bench registers --record PATH``: write :func:`kernel_registers` as JSON."""
    p = arguments("registers", main.__doc__)
    p.add_argument("--record", metavar="PATH", required=True, help="where to write the registers JSON")
    args = p.parse_args(argv)
    env = course.setup(show=False, prewarm=False)
    if env.mode != "gpu":
        print("needs an NVIDIA GPU: registers per thread come from the compiled kernels")
        return 1
    import cupy as cp
    import numba

    source = f"python -m mgpu_helpers.bench registers --record, on one {env.gpus[0].name}"
    versions = {"cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__, "numba": numba.__version__}
    out = {"_source": source, **versions, **kernel_registers()}
    with open(args.record, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))
    return 0
