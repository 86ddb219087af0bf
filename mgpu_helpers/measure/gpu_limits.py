"""What the current GPU and its compiler report: per-SM limits, a kernel's registers, the driver's occupancy
(the arithmetic on them is :mod:`mgpu_helpers.models.occupancy`'s). Import after ``mh.setup()``. Without a GPU
the Numba queries answer with the Hopper defaults or ``None``; the CuPy ones need a GPU."""

import functools

from mgpu_helpers.measure.timing import simulator
from mgpu_helpers.models.occupancy import HOPPER, SmLimits
from mgpu_helpers.report.recorded import read_json

# SmLimits field: (Numba's device attribute, CuPy's); None: Numba reports none, the Hopper default stays
LIMIT_ATTRIBUTES = {
    "regs_per_sm": ("MAX_REGISTERS_PER_MULTIPROCESSOR", "MaxRegistersPerMultiprocessor"),
    "regs_per_block": ("MAX_REGISTERS_PER_BLOCK", "MaxRegistersPerBlock"),
    "max_threads_per_sm": ("MAX_THREADS_PER_MULTIPROCESSOR", "MaxThreadsPerMultiProcessor"),
    "max_blocks_per_sm": ("MAX_BLOCKS_PER_MULTIPROCESSOR", "MaxBlocksPerMultiprocessor"),
    "max_threads_per_block": ("MAX_THREADS_PER_BLOCK", "MaxThreadsPerBlock"),
    "smem_per_sm": ("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MaxSharedMemoryPerMultiprocessor"),
    "smem_reserved_per_block": (None, "ReservedSharedMemoryPerBlock"),
    "warp_size": ("WARP_SIZE", "WarpSize"),
    "sm_count": ("MULTIPROCESSOR_COUNT", "MultiProcessorCount"),
}


def device_limits() -> SmLimits:
    if simulator():
        return HOPPER
    from numba import cuda

    dev = cuda.get_current_device()
    return SmLimits(**{field: getattr(dev, name) for field, (name, _) in LIMIT_ATTRIBUTES.items() if name})


def numba_regs_per_thread(kernel) -> int | None:
    """Registers per thread of a Numba kernel's first compiled version; None in the simulator or before a launch."""
    if simulator() or not getattr(kernel, "overloads", None):
        return None
    regs = kernel.get_regs_per_thread()
    if isinstance(regs, dict):
        regs = next(iter(regs.values()))
    return int(regs)


def cupy_limits() -> SmLimits:
    import cupy as cp

    return _cupy_limits(cp.cuda.Device().id)


@functools.cache
def _cupy_limits(device_id: int) -> SmLimits:
    import cupy as cp

    at = cp.cuda.Device(device_id).attributes
    # An attribute CuPy does not report keeps the Hopper default, except the SM count: no architecture has one.
    get = lambda field, name: at[name] if field == "sm_count" else at.get(name, getattr(HOPPER, field))
    return SmLimits(**{field: get(field, name) for field, (_, name) in LIMIT_ATTRIBUTES.items()})


def cupy_driver_blocks_per_sm(kernel, block: int, smem_per_block: int = 0) -> int:
    """The driver's own occupancy answer for a compiled CuPy ``RawKernel``, to check the model's."""
    from cupy_backends.cuda.api import driver

    return driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, block, smem_per_block)


def recorded_registers() -> dict:
    """Notebook 02's kernels' registers as recorded on an H200 (``bench registers``), for machines without a GPU."""
    return read_json("kernel_registers_h200.json")
