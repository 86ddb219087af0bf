"""The course's vector-add kernels: one copy shared by notebooks 01/02, ``bench kernels`` and the tests.

Import this module only after ``mh.setup()``: it imports ``numba.cuda`` (and defines the Numba kernels) at
import time, and Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported. CuPy kernels are built
lazily by :func:`cupy_kernels` (compiling needs a GPU).

Contents
- Numba kernels: :data:`vec_add` (the seed's kernel), :data:`vec_add_unchecked` (the same without the bounds
  check), :data:`vec_add_fast` (four elements per thread in a block tile, full grid: the fast one),
  :data:`vec_add_grid_stride` (grid-stride loop over a one-wave grid, four elements per thread per trip);
- CuPy kernels (:func:`cupy_kernels`): the seed's C source as a ``RawKernel``, an ``ElementwiseKernel``, a
  float4 ``RawKernel`` over a full grid (the fast one), a float4 grid-stride ``RawKernel`` for comparison, and
  a register-hungry kernel for the register-spill story;
- host-side helpers: launch configuration, explicit-copy vecAdd with per-step timings, timing with CUDA events,
  occupancy arithmetic (a pure function, unit-tested), reading registers per thread.
"""
from __future__ import annotations

import functools
import inspect
import math
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from numba import config as _numba_config
from numba import cuda

SIMULATOR: bool = bool(_numba_config.ENABLE_CUDASIM)
"""True when Numba runs kernels in its CUDA simulator (CPU mode)."""

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024


# ---------------------------------------------------------------------------------------------------------------
# Numba kernels
# ---------------------------------------------------------------------------------------------------------------

@cuda.jit
def vec_add(a, b, c, n):
    """The seed's vecAdd: one thread per element, threads past the end do nothing."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        c[i] = a[i] + b[i]


@cuda.jit
def vec_add_unchecked(a, b, c):
    """vecAdd WITHOUT the bounds check: every launched thread touches a[i], b[i], c[i]. Do not copy."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c[i] = a[i] + b[i]


@cuda.jit
def vec_add_fast(a, b, c, n):
    """Block-tile vecAdd: each thread adds four elements, the grid covers the whole array (no loop).

    Block ``k`` owns the tile of ``4 * blockDim`` elements starting at ``4 * blockDim * k``; thread ``t`` takes
    elements i, i + bd, i + 2bd, i + 3bd of it (i = tile start + t, bd = blockDim), so every access of a warp is
    still 32 consecutive floats. All eight loads are issued before the first store: four independent pairs of
    loads in flight per thread instead of one. The last, partial tile takes the checked path.
    """
    bd = cuda.blockDim.x
    i = cuda.blockIdx.x * bd * 4 + cuda.threadIdx.x
    if i + 3 * bd < n:
        a0 = a[i]
        a1 = a[i + bd]
        a2 = a[i + 2 * bd]
        a3 = a[i + 3 * bd]
        b0 = b[i]
        b1 = b[i + bd]
        b2 = b[i + 2 * bd]
        b3 = b[i + 3 * bd]
        c[i] = a0 + b0
        c[i + bd] = a1 + b1
        c[i + 2 * bd] = a2 + b2
        c[i + 3 * bd] = a3 + b3
    else:
        for k in range(4):
            j = i + k * bd
            if j < n:
                c[j] = a[j] + b[j]


ELEMENTS_PER_THREAD = 4
"""Elements each thread of :data:`vec_add_fast` adds."""


@cuda.jit
def vec_add_grid_stride(a, b, c, n):
    """Grid-stride vecAdd: a grid of any size (the course uses one wave of resident blocks) walks the array.

    Each trip a thread issues four independent loads from a and four from b (elements i, i+s, i+2s, i+3s with
    s = the grid's thread count, so a warp still reads 32 consecutive floats per access) before its first store.
    The tail that does not fill four strides is finished one element per trip. Correct for every grid size;
    on an H200 with a one-wave grid it reaches about 85% of torch.add, where :data:`vec_add_fast` reaches 98%.
    """
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    while i + 3 * stride < n:
        a0 = a[i]
        a1 = a[i + stride]
        a2 = a[i + 2 * stride]
        a3 = a[i + 3 * stride]
        b0 = b[i]
        b1 = b[i + stride]
        b2 = b[i + 2 * stride]
        b3 = b[i + 3 * stride]
        c[i] = a0 + b0
        c[i + stride] = a1 + b1
        c[i + 2 * stride] = a2 + b2
        c[i + 3 * stride] = a3 + b3
        i += 4 * stride
    while i < n:
        c[i] = a[i] + b[i]
        i += stride


@cuda.jit
def whoami(block_idx, thread_idx, global_idx, warp, lane):
    """Each thread writes down who it is: blockIdx.x, threadIdx.x, its global index, its warp in the block and
    its lane in the warp. No bounds check needed: the arrays have one slot per launched thread."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    block_idx[i] = cuda.blockIdx.x
    thread_idx[i] = cuda.threadIdx.x
    global_idx[i] = i
    warp[i] = cuda.threadIdx.x // cuda.warpsize
    lane[i] = cuda.threadIdx.x % cuda.warpsize


# float32 constants: a bare 0.999 would be a float64 literal and turn the whole loop into float64 arithmetic.
_MUL, _ADD, _HALF, _EIGHTH = np.float32(0.999), np.float32(0.25), np.float32(0.5), np.float32(0.125)


@cuda.jit
def branch_work(out, iters, warp_uniform):
    """SIMT demo: half the threads take path A, half path B, with the same work per thread either way.

    ``warp_uniform`` false: the choice is threadIdx.x's parity, so every warp holds both kinds of thread and
    runs path A and then path B with half its lanes masked each time. True: the choice is the warp's parity, so
    each warp runs one path only. The two paths are different instruction sequences (the compiler cannot merge
    them into one). With many warps per SM the kernel is issue-bound, so the diverged launch takes about twice
    as long. On a GPU the multiply-adds are fused (FMA), so results differ from NumPy's in the last bits.
    """
    i = cuda.grid(1)
    if i >= out.size:
        return
    key = cuda.threadIdx.x // cuda.warpsize if warp_uniform else cuda.threadIdx.x
    x = out[i]
    if key % 2 == 0:
        for _ in range(iters):
            x = x * _MUL + _ADD         # path A: multiply-add
    else:
        for _ in range(iters):
            x = x * x * _HALF + _EIGHTH  # path B: square, then multiply-add
    out[i] = x


def branch_reference(x0: np.ndarray, iters: int, warp_uniform: bool, block: int,
                     index: np.ndarray | None = None) -> np.ndarray:
    """What :data:`branch_work` computes, in NumPy (float32; unfused multiply-adds, see branch_work).

    ``x0``: the starting values; ``index``: their global thread indices (default 0..len-1), so a sample of a
    large launch can be checked without simulating all of it."""
    t = (np.arange(x0.size) if index is None else np.asarray(index)) % block
    key = t // WARP_SIZE if warp_uniform else t
    x = x0.astype(np.float32).copy()
    a, b = key % 2 == 0, key % 2 == 1
    for _ in range(iters):
        x[a] = x[a] * _MUL + _ADD
        x[b] = x[b] * x[b] * _HALF + _EIGHTH
    return x


def launch_config(n: int, block: int = 256) -> tuple[int, int]:
    """The seed's launch ``<<<(N+255)/256, 256>>>`` for any block size: (blocks, threads per block).

    Enough blocks that blocks * block >= n; the last block may have idle threads (the bounds check).
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, not {block}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    return max(1, (n + block - 1) // block), block


def check_launch(grid: int, block: int, max_threads_per_block: int = MAX_THREADS_PER_BLOCK) -> None:
    """Refuse a launch configuration the hardware will refuse, with a message that says why.

    The same check on every machine: the CUDA simulator does not enforce the 1024-threads-per-block limit,
    a real GPU does (the launch fails with CUDA_ERROR_INVALID_VALUE)."""
    if not 1 <= block <= max_threads_per_block:
        raise ValueError(f"block of {block} threads: a block holds 1..{max_threads_per_block} threads")
    if grid < 1:
        raise ValueError(f"grid of {grid} blocks: launch at least one block")


def launch_checked(kernel, grid: int, block: int, *args) -> None:
    """Launch the way the seed's habit asks: check the configuration, launch, then synchronize so an error
    raised while the kernel runs surfaces here, at this call, and not at some later unrelated one."""
    check_launch(grid, block)
    kernel[grid, block](*args)
    cuda.synchronize()


def source(obj) -> str:
    """The source text of a kernel: a Numba kernel's Python function, or a CuPy kernel's CUDA C."""
    if isinstance(obj, str):
        return obj
    for attr in ("py_func", "fn"):  # real Numba dispatcher / simulator kernel
        if hasattr(obj, attr):
            return inspect.getsource(getattr(obj, attr))
    if inspect.isfunction(obj):
        return inspect.getsource(obj)
    if hasattr(obj, "code"):
        return obj.code
    if hasattr(obj, "operation"):
        return obj.operation
    raise TypeError(f"no source for {obj!r}")


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------

def synchronize() -> None:
    """Wait for all queued Numba work (a no-op in the simulator, which runs synchronously)."""
    cuda.synchronize()


def time_gpu(fn, repeats: int = 20, warmup: int = 2, library: str = "numba") -> list[float]:
    """Times of ``fn()`` in milliseconds, one per repeat, measured with CUDA events of ``library``.

    ``library`` is "numba", "cupy" or "torch": whose events bracket the call (all three use the legacy default
    stream here). Each repeat first queues an untimed ``fn()`` and then records start, ``fn()``, stop: the
    timed launch is queued while the untimed one still runs, so the time measures the kernel, not the
    Python-side launch cost (tens of microseconds in Numba) that an idle GPU would otherwise wait through.
    In the Numba simulator (no GPU), wall-clock seconds of ``fn()`` are used instead.
    """
    if library == "numba" and SIMULATOR:
        out = []
        for _ in range(warmup):
            fn()
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    make_event, sync, elapsed = _event_api(library)
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        start, stop = make_event(), make_event()
        fn()  # keeps the GPU busy while the timed launch is queued
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        out.append(elapsed(start, stop))
    return out


def _event_api(library: str):
    if library == "numba":
        return cuda.event, cuda.synchronize, lambda s, e: s.elapsed_time(e)
    if library == "cupy":
        import cupy
        return (cupy.cuda.Event, cupy.cuda.Device().synchronize,
                lambda s, e: cupy.cuda.get_elapsed_time(s, e))
    if library == "torch":
        import torch
        return (lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize,
                lambda s, e: s.elapsed_time(e))
    raise ValueError(f"library must be 'numba', 'cupy' or 'torch', not {library!r}")


def bandwidth_gbps(nbytes: int, ms: float) -> float:
    """Effective bandwidth in GB/s (1e9 bytes per second): bytes read + written over the time in ms."""
    if ms <= 0:
        raise ValueError(f"time must be positive, not {ms} ms")
    return nbytes / (ms * 1e-3) / 1e9


def vec_add_bytes(n: int, itemsize: int = 4) -> int:
    """Bytes a vecAdd of n elements moves: reads a and b, writes c."""
    return 3 * n * itemsize


# ---------------------------------------------------------------------------------------------------------------
# vecAdd with explicit device memory (notebook 01)
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class StepTimes:
    """Wall-clock milliseconds of each step of one GPU vecAdd, and of NumPy's ``a + b`` on the host."""

    alloc: float
    copy_in: float
    kernel: float
    copy_out: float
    numpy: float

    @property
    def gpu_total(self) -> float:
        return self.alloc + self.copy_in + self.kernel + self.copy_out

    def rows(self) -> list[tuple[str, float]]:
        return [("cudaMalloc x3", self.alloc), ("copy in (H2D)", self.copy_in), ("kernel", self.kernel),
                ("copy out (D2H)", self.copy_out), ("GPU total", self.gpu_total), ("NumPy a + b", self.numpy)]


def vec_add_numba(h_a: np.ndarray, h_b: np.ndarray, block: int = 256, kernel=None) -> tuple[np.ndarray, StepTimes]:
    """The seed's ``main()`` in Numba: allocate on the device, copy in, launch, copy back.

    ``h_a``, ``h_b``: 1-D float32 host arrays of the same length. Returns (``h_c``, :class:`StepTimes`), each
    step timed with a synchronize on both sides so a step's time is what the host waits for it.
    """
    if h_a.shape != h_b.shape or h_a.ndim != 1:
        raise ValueError(f"need two 1-D arrays of one length, got {h_a.shape} and {h_b.shape}")
    kernel = vec_add if kernel is None else kernel
    n = h_a.size
    grid, block = launch_config(n, block)
    t = [time.perf_counter()]

    def mark():
        cuda.synchronize()
        t.append(time.perf_counter())

    d_a = cuda.device_array(n, dtype=h_a.dtype)    # cudaMalloc(&d_A, N * sizeof(float))
    d_b = cuda.device_array(n, dtype=h_b.dtype)
    d_c = cuda.device_array(n, dtype=h_a.dtype)
    mark()
    d_a.copy_to_device(h_a)                          # cudaMemcpy(d_A, h_A, ..., cudaMemcpyHostToDevice)
    d_b.copy_to_device(h_b)
    mark()
    kernel[grid, block](d_a, d_b, d_c, n)            # vecAdd<<<(N+255)/256, 256>>>(d_A, d_B, d_C, N)
    mark()
    h_c = d_c.copy_to_host()                         # cudaMemcpy(h_C, d_C, ..., cudaMemcpyDeviceToHost)
    mark()
    t0 = time.perf_counter()
    ref = h_a + h_b
    t_np = time.perf_counter() - t0
    del ref
    ms = [(t[k + 1] - t[k]) * 1e3 for k in range(4)]
    return h_c, StepTimes(*ms, numpy=t_np * 1e3)


# ---------------------------------------------------------------------------------------------------------------
# Occupancy: a pure function of the block size, registers and shared memory per block
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one GPU architecture (defaults: Hopper, compute capability 9.0: H100/H200)."""

    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256          # registers are handed out per warp in units of 256
    sub_partitions: int = 4            # an SM is 4 partitions, each with its own quarter of the register file
    regs_per_block: int = 65536
    smem_per_sm: int = 228 * 1024
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 1024  # set aside by the system for every block (compute capability >= 8.0)
    warp_size: int = 32
    sm_count: int = 132                # H200 SXM

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


HOPPER = SmLimits()


@dataclass(frozen=True)
class Occupancy:
    """What fits on one SM: ``blocks_per_sm`` resident blocks, ``fraction`` = active warps / max warps,
    ``limiter`` = which resource ran out first ("threads", "registers", "blocks", "shared memory", or the
    reason the block cannot launch at all)."""

    block: int
    regs_per_thread: int
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str

    @property
    def fraction(self) -> float:
        return self.active_warps / self.max_warps

    @property
    def launchable(self) -> bool:
        return self.blocks_per_sm > 0


def occupancy(block: int, regs_per_thread: int, smem_per_block: int = 0, limits: SmLimits = HOPPER) -> Occupancy:
    """Resident blocks and warps per SM for a kernel, as the CUDA occupancy calculator (cuda_occupancy.h)
    computes them: the smallest of the limits set by threads, blocks, registers and shared memory per SM.

    ``block``: threads per block; ``regs_per_thread``: from ``get_regs_per_thread()`` / ``attributes['num_regs']``;
    ``smem_per_block``: static + dynamic shared memory in bytes. A block that cannot run at all (more than
    ``max_threads_per_block`` threads, or more registers than one SM has) gives ``blocks_per_sm == 0``: the
    launch fails with "too many resources requested for launch" (or "invalid argument" past 1024 threads).
    """
    if block < 1 or regs_per_thread < 0 or smem_per_block < 0:
        raise ValueError("block must be >= 1, registers and shared memory >= 0")
    lim = limits
    warps_per_block = math.ceil(block / lim.warp_size)
    if block > lim.max_threads_per_block:
        return Occupancy(block, regs_per_thread, 0, 0, lim.max_warps_per_sm,
                         f"block > {lim.max_threads_per_block} threads: cannot launch")
    candidates = {
        "threads": lim.max_warps_per_sm // warps_per_block,
        "blocks": lim.max_blocks_per_sm,
    }
    if regs_per_thread > 0:
        regs_per_warp = math.ceil(regs_per_thread * lim.warp_size / lim.reg_alloc_unit) * lim.reg_alloc_unit
        # The launch check assumes a block's warps spread over all sub-partitions (rounded up to 4 warps).
        parts = lim.sub_partitions
        assumed = regs_per_warp * (math.ceil(warps_per_block / parts) * parts)
        if assumed > lim.regs_per_block or regs_per_warp * warps_per_block > lim.regs_per_block:
            candidates["registers"] = 0
        else:
            # Registers live in the sub-partitions: whole warps per quarter, times four.
            warps_by_regs = (lim.regs_per_sm // parts // regs_per_warp) * parts
            candidates["registers"] = warps_by_regs // warps_per_block
    if smem_per_block > 0:
        smem = math.ceil(smem_per_block / lim.smem_alloc_unit) * lim.smem_alloc_unit + lim.smem_reserved_per_block
        candidates["shared memory"] = lim.smem_per_sm // smem
    limiter = min(candidates, key=lambda k: (candidates[k], list(candidates).index(k)))
    blocks = candidates[limiter]
    if blocks == 0:
        limiter = f"{limiter}: one block needs more than an SM has, cannot launch"
    return Occupancy(block, regs_per_thread, blocks, blocks * warps_per_block, lim.max_warps_per_sm, limiter)


def spill_reservation_bytes(local_bytes_per_thread: int, limits: SmLimits = HOPPER) -> int:
    """Device memory the driver sets aside for local memory (register spills, stack): every thread that can be
    resident at once gets its own slice, so it is bytes per thread x threads per SM x SMs."""
    return local_bytes_per_thread * limits.max_threads_per_sm * limits.sm_count


def device_limits() -> SmLimits:
    """The current GPU's limits read through Numba (Hopper defaults in the simulator)."""
    if SIMULATOR:
        return HOPPER
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
    if SIMULATOR or not getattr(kernel, "overloads", None):
        return None
    regs = kernel.get_regs_per_thread()
    if isinstance(regs, dict):
        regs = next(iter(regs.values()))
    return int(regs)


def one_wave_grid(kernel=None, block: int = 256) -> int:
    """Blocks for a grid-stride kernel: exactly one wave, SMs x resident blocks per SM.

    More blocks than fit at once would leave a second, partial wave in which every late block still walks its
    full share of the array; fewer would leave SM slots empty. The resident count comes from the driver's
    occupancy query for the compiled kernel (the same answer as :func:`occupancy` with its register count).
    ``kernel``: a Numba kernel already compiled once (default :data:`vec_add_grid_stride`). Simulator: 4 blocks.
    """
    kernel = vec_add_grid_stride if kernel is None else kernel
    if SIMULATOR:
        return 4
    compiled = next(iter(kernel.overloads.values()))
    try:
        return max(1, compiled.max_cooperative_grid_blocks(block))  # = blocks per SM x SM count
    except Exception:  # an older Numba without the query: the same arithmetic by hand
        limits = device_limits()
        occ = occupancy(block, compiled.regs_per_thread, limits=limits)
        return max(1, occ.blocks_per_sm) * limits.sm_count


def _check_lengths(d_a, d_b, d_c) -> int:
    n = d_c.size
    if not d_a.size == d_b.size == n:
        raise ValueError(f"arrays differ in length: {d_a.size}, {d_b.size}, {n}")
    return n


def fast_launch_grid(n: int, block: int = 256) -> int:
    """The full grid of :data:`vec_add_fast`: ceil(n / (4 * block)) blocks (at least one), so that every
    element has a thread and every block a full tile except perhaps the last."""
    if block < 1:
        raise ValueError(f"block must be >= 1, not {block}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    per_block = ELEMENTS_PER_THREAD * block
    return max(1, (n + per_block - 1) // per_block)


def vec_add_fast_launch(d_a, d_b, d_c, block: int = 256, grid: int | None = None) -> int:
    """Launch :data:`vec_add_fast` over device arrays with the full grid; returns the grid used.

    ``grid`` defaults to :func:`fast_launch_grid`; a smaller one would leave elements unwritten (the kernel has
    no loop), so it is refused."""
    n = _check_lengths(d_a, d_b, d_c)
    full = fast_launch_grid(n, block)
    if grid is None:
        grid = full
    elif grid < full:
        raise ValueError(f"grid of {grid} blocks covers {grid * ELEMENTS_PER_THREAD * block} elements, not {n}: "
                         f"vec_add_fast needs {full} blocks of {block}")
    vec_add_fast[grid, block](d_a, d_b, d_c, n)
    return grid


def vec_add_grid_stride_launch(d_a, d_b, d_c, block: int = 256, grid: int | None = None) -> int:
    """Launch :data:`vec_add_grid_stride` over device arrays, by default with a one-wave grid
    (:func:`one_wave_grid`); any ``grid`` >= 1 covers the whole array. Returns the grid used."""
    n = _check_lengths(d_a, d_b, d_c)
    if grid is None:
        if numba_regs_per_thread(vec_add_grid_stride) is None and not SIMULATOR:
            vec_add_grid_stride[1, block](d_a, d_b, d_c, 0)  # compile once so the register count is known
        grid = one_wave_grid(vec_add_grid_stride, block)
    vec_add_grid_stride[grid, block](d_a, d_b, d_c, n)
    return grid


# ---------------------------------------------------------------------------------------------------------------
# CuPy kernels (built on first use: compiling needs a GPU)
# ---------------------------------------------------------------------------------------------------------------

SEED_VEC_ADD_SRC = r'''
extern "C" __global__ void vecAdd(float* A, float* B, float* C, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        C[i] = A[i] + B[i];
    }
}
'''
"""The seed's CUDA C kernel, unchanged."""

FAST_VEC_ADD_SRC = r'''
// vecAdd with 16-byte loads: thread i loads one float4 of A and one of B (elements 4i..4i+3), adds, stores one
// float4. The grid has a thread for every group of four: ceil(ceil(N / 4) / blockDim) blocks, no loop.
extern "C" __global__ void vecAddFast(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ C, long long N) {
    long long n4 = N / 4;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 a = reinterpret_cast<const float4*>(A)[i];
        float4 b = reinterpret_cast<const float4*>(B)[i];
        reinterpret_cast<float4*>(C)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    } else if (4 * i < N) {
        // Thread n4 adds the last N % 4 elements one by one.
        for (long long j = 4 * i; j < N; ++j) {
            C[j] = A[j] + B[j];
        }
    }
}
'''
"""The course's fast CuPy kernel: one float4 per thread, full grid (float4 needs 16-byte aligned arrays)."""

GRID_STRIDE_VEC_ADD_SRC = r'''
// Grid-stride vecAdd with 16-byte loads: each trip a thread loads two float4 of A and two of B
// (32 bytes in flight per array), adds, and stores two float4. The grid is about one wave of resident blocks.
extern "C" __global__ void vecAddGridStride(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, long long N) {
    const float4* A4 = reinterpret_cast<const float4*>(A);
    const float4* B4 = reinterpret_cast<const float4*>(B);
    float4* C4 = reinterpret_cast<float4*>(C);
    long long n4 = N / 4;
    long long stride = (long long)blockDim.x * gridDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + stride < n4; i += 2 * stride) {
        float4 a0 = A4[i], a1 = A4[i + stride];
        float4 b0 = B4[i], b1 = B4[i + stride];
        C4[i] = make_float4(a0.x + b0.x, a0.y + b0.y, a0.z + b0.z, a0.w + b0.w);
        C4[i + stride] = make_float4(a1.x + b1.x, a1.y + b1.y, a1.z + b1.z, a1.w + b1.w);
    }
    if (i < n4) {
        float4 a = A4[i], b = B4[i];
        C4[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
    // The last N % 4 elements, one thread each.
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < N - 4 * n4) {
        C[4 * n4 + t] = A[4 * n4 + t] + B[4 * n4 + t];
    }
}
'''
"""The float4 grid-stride kernel, kept for comparison with :data:`FAST_VEC_ADD_SRC` (slower on an H200)."""

MANY_REGS_SRC = r'''
// Keeps K loaded values alive at once (the second loop needs the sum of all of them first), so the compiler
// wants more than K registers per thread. With __launch_bounds__(1024) it may use at most 64 and spills the
// rest to local memory, which lives in device memory.
#define K 128
extern "C" __global__ void BOUNDS manyRegs(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v[K];
    #pragma unroll
    for (int k = 0; k < K; ++k) v[k] = x[(i + 131 * k) % n];
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < K; ++k) s += v[k];
    float acc = 0.f;
    #pragma unroll
    for (int k = 0; k < K; ++k) acc += v[k] * (s - v[K - 1 - k]);
    y[i] = acc;
}
'''


@functools.lru_cache(maxsize=None)
def cupy_kernels() -> SimpleNamespace:
    """The CuPy kernels, compiled on first call (needs a GPU).

    ``raw``: the seed's C kernel (``vecAdd``); ``elementwise``: ``c = a + b`` as an ``ElementwiseKernel``;
    ``fast``: one float4 per thread over a full grid; ``grid_stride``: the float4 grid-stride kernel (for comparison);
    ``many_regs`` / ``many_regs_bounded``: the register-hungry kernel
    without / with ``__launch_bounds__(1024)``.
    """
    import cupy as cp
    return SimpleNamespace(
        raw=cp.RawKernel(SEED_VEC_ADD_SRC, "vecAdd"),
        elementwise=cp.ElementwiseKernel("float32 a, float32 b", "float32 c", "c = a + b", "vec_add_ew"),
        fast=cp.RawKernel(FAST_VEC_ADD_SRC, "vecAddFast"),
        grid_stride=cp.RawKernel(GRID_STRIDE_VEC_ADD_SRC, "vecAddGridStride"),
        many_regs=cp.RawKernel(MANY_REGS_SRC.replace("BOUNDS", ""), "manyRegs"),
        many_regs_bounded=cp.RawKernel(MANY_REGS_SRC.replace("BOUNDS", "__launch_bounds__(1024)"), "manyRegs"),
    )


def cupy_limits() -> SmLimits:
    """The current GPU's limits read through CuPy."""
    import cupy as cp
    dev = cp.cuda.Device()
    return _cupy_limits(dev.id)


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


def cupy_driver_blocks_per_sm(kernel, block: int) -> int:
    """The driver's own occupancy answer for a compiled CuPy ``RawKernel`` (to check :func:`occupancy`)."""
    from cupy_backends.cuda.api import driver
    return driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, block, 0)


def vec_add_cupy_raw(a, b, c=None, block: int = 256):
    """The seed's kernel through CuPy: ``vecAdd<<<(N+block-1)/block, block>>>(a, b, c, N)``; returns c."""
    import cupy as cp
    c = cp.empty_like(a) if c is None else c
    _check_f32(a, b, c)
    grid, block = launch_config(a.size, block)
    cupy_kernels().raw((grid,), (block,), (a, b, c, np.int32(a.size)))
    return c


def vec_add_cupy_elementwise(a, b, c=None):
    """``c = a + b`` with the ``ElementwiseKernel``; returns c."""
    return cupy_kernels().elementwise(a, b, c) if c is not None else cupy_kernels().elementwise(a, b)


def _aligned(*arrays) -> bool:
    return not any(x.data.ptr % 16 for x in arrays)


def cupy_fast_grid(n: int, block: int = 256) -> int:
    """The full grid of the float4 kernel: one thread per group of four elements (the last group may be
    shorter), ceil(ceil(n / 4) / block) blocks, at least one."""
    return launch_config((n + 3) // 4, block)[0]


def vec_add_cupy_fast(a, b, c=None, block: int = 256):
    """The float4 kernel, one float4 per thread over the full grid (:func:`cupy_fast_grid`); returns c.

    float4 loads need 16-byte aligned arrays: CuPy's own allocations are; a view that starts elsewhere falls back
    to the seed's kernel rather than fault."""
    import cupy as cp
    c = cp.empty_like(a) if c is None else c
    _check_f32(a, b, c)
    if not _aligned(a, b, c):
        return vec_add_cupy_raw(a, b, c, block)
    cupy_kernels().fast((cupy_fast_grid(a.size, block),), (block,), (a, b, c, np.int64(a.size)))
    return c


def vec_add_cupy_grid_stride(a, b, c=None, block: int = 256, grid: int | None = None):
    """The float4 grid-stride kernel, by default with a one-wave grid (from the driver's occupancy); returns c.
    Same 16-byte alignment fallback as :func:`vec_add_cupy_fast`."""
    import cupy as cp
    c = cp.empty_like(a) if c is None else c
    _check_f32(a, b, c)
    if not _aligned(a, b, c):
        return vec_add_cupy_raw(a, b, c, block)
    if grid is None:
        grid = _cupy_one_wave_grid(cp.cuda.Device().id, block)
    cupy_kernels().grid_stride((grid,), (block,), (a, b, c, np.int64(a.size)))
    return c


@functools.lru_cache(maxsize=None)
def _cupy_one_wave_grid(device_id: int, block: int) -> int:
    """One wave of the grid-stride kernel on this device: SMs x resident blocks per SM (cached: the driver
    query and the attribute reads would otherwise cost tens of microseconds on every launch)."""
    per_sm = cupy_driver_blocks_per_sm(cupy_kernels().grid_stride, block)
    return max(1, per_sm) * _cupy_limits(device_id).sm_count


def _check_f32(*arrays) -> None:
    for x in arrays:
        if x.dtype != np.float32 or x.ndim != 1 or not x.flags.c_contiguous:
            raise ValueError(f"need contiguous 1-D float32 arrays, got {x.dtype} {x.shape}")
    if len({x.size for x in arrays}) != 1:
        raise ValueError(f"arrays differ in length: {[x.size for x in arrays]}")
