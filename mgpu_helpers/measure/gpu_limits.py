"""What the current GPU and its compiler report: per-SM limits, a kernel's registers, the driver's occupancy.

The arithmetic on these numbers is pure and lives in :mod:`mgpu_helpers.models.occupancy`; this module only
asks the device (through Numba or CuPy). Import after ``mh.setup()``. Without a GPU the Numba queries answer
with the Hopper defaults (:data:`~mgpu_helpers.models.occupancy.HOPPER`) or ``None``; the CuPy ones need a GPU.
"""
from __future__ import annotations

import functools

from mgpu_helpers.measure.timing import simulator
from mgpu_helpers.models.occupancy import HOPPER, SmLimits


def device_limits() -> SmLimits:
    """The current GPU's per-SM limits read through Numba (the Hopper defaults in the simulator)."""
    if simulator():
        return HOPPER
    from numba import cuda

    dev = cuda.get_current_device()
    return SmLimits(
        regs_per_sm=dev.MAX_REGISTERS_PER_MULTIPROCESSOR,
        regs_per_block=dev.MAX_REGISTERS_PER_BLOCK,
        max_threads_per_sm=dev.MAX_THREADS_PER_MULTIPROCESSOR,
        max_blocks_per_sm=dev.MAX_BLOCKS_PER_MULTIPROCESSOR,
        max_threads_per_block=dev.MAX_THREADS_PER_BLOCK,
        smem_per_sm=dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        warp_size=dev.WARP_SIZE,
        sm_count=dev.MULTIPROCESSOR_COUNT,
    )


def numba_regs_per_thread(kernel) -> int | None:
    """Registers per thread of a Numba kernel's (first) compiled version; None in the simulator or before the
    kernel has been compiled (launch it once first)."""
    if simulator() or not getattr(kernel, "overloads", None):
        return None
    regs = kernel.get_regs_per_thread()
    if isinstance(regs, dict):
        regs = next(iter(regs.values()))
    return int(regs)


def cupy_limits() -> SmLimits:
    """The current GPU's per-SM limits read through CuPy (needs a GPU)."""
    import cupy as cp

    return _cupy_limits(cp.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _cupy_limits(device_id: int) -> SmLimits:
    import cupy as cp

    at = cp.cuda.Device(device_id).attributes
    h = HOPPER
    return SmLimits(
        regs_per_sm=at.get("MaxRegistersPerMultiprocessor", h.regs_per_sm),
        regs_per_block=at.get("MaxRegistersPerBlock", h.regs_per_block),
        max_threads_per_sm=at.get("MaxThreadsPerMultiProcessor", h.max_threads_per_sm),
        max_blocks_per_sm=at.get("MaxBlocksPerMultiprocessor", h.max_blocks_per_sm),
        max_threads_per_block=at.get("MaxThreadsPerBlock", h.max_threads_per_block),
        smem_per_sm=at.get("MaxSharedMemoryPerMultiprocessor", h.smem_per_sm),
        smem_reserved_per_block=at.get("ReservedSharedMemoryPerBlock", h.smem_reserved_per_block),
        warp_size=at.get("WarpSize", h.warp_size),
        sm_count=at["MultiProcessorCount"],
    )


def cupy_driver_blocks_per_sm(kernel, block: int, smem_per_block: int = 0) -> int:
    """The driver's own occupancy answer (cuOccupancyMaxActiveBlocksPerMultiprocessor) for a compiled CuPy
    ``RawKernel`` at ``block`` threads per block: to check :func:`~mgpu_helpers.models.occupancy.occupancy`."""
    from cupy_backends.cuda.api import driver

    return driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, block, smem_per_block)


# --------------------------------------------------------------------------------------------------------
# What the compiler gave notebook 02's kernels, recorded on an H200 so that a machine without a GPU can show it.

REGISTERS_FILE = "kernel_registers_h200.json"


def kernel_registers(n: int = 1 << 20) -> dict:
    """Registers (and local bytes) per thread of notebook 02's kernels on this GPU: the seed's C vecAdd as a CuPy
    RawKernel, ``manyRegs`` free and under ``__launch_bounds__(1024)``, and Numba's ``vec_add`` (launched once
    on ``n`` elements so that it is compiled). Needs a GPU."""
    import cupy as cp
    from numba import cuda

    from mgpu_helpers.lessons import cuda_model, cupy_kernels

    seed = cupy_kernels.raw_kernel(cupy_kernels.SEED_VEC_ADD_SRC, "vecAdd").attributes
    free, bounded = (k.attributes for k in cupy_kernels.many_regs_kernels())
    a = cp.ones(n, cp.float32)
    c = cp.empty_like(a)
    cuda_model.vec_add[(n + 255) // 256, 256](cuda.as_cuda_array(a), cuda.as_cuda_array(a), cuda.as_cuda_array(c), n)
    cuda.synchronize()
    return {
        "seed_vecAdd_cupy": {"registers": seed["num_regs"], "local_bytes": seed["local_size_bytes"]},
        "manyRegs": {"registers": free["num_regs"], "local_bytes": free["local_size_bytes"]},
        "manyRegs_launch_bounds_1024": {"registers": bounded["num_regs"], "local_bytes": bounded["local_size_bytes"]},
        "numba_vec_add": {"registers": numba_regs_per_thread(cuda_model.vec_add)},
    }


def recorded_registers() -> dict:
    """The figures of :func:`kernel_registers` recorded on an H200 (``data/kernel_registers_h200.json``)."""
    import json
    from importlib import resources

    return json.loads(resources.files("mgpu_helpers").joinpath("data", REGISTERS_FILE).read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    """``python -m mgpu_helpers.measure.gpu_limits --record PATH``: write :func:`kernel_registers` as JSON."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m mgpu_helpers.measure.gpu_limits", description=main.__doc__)
    p.add_argument("--record", metavar="PATH", required=True, help="where to write the registers JSON")
    args = p.parse_args(argv)
    from mgpu_helpers import course
    env = course.setup(show=False, prewarm=False)
    if env.mode != "gpu":
        print("needs an NVIDIA GPU: registers per thread come from the compiled kernels")
        return 1
    import cupy as cp
    import numba

    out = {"_source": f"python -m mgpu_helpers.measure.gpu_limits --record, on one {env.gpus[0].name}",
           "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__, "numba": numba.__version__,
           **kernel_registers()}
    with open(args.record, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
