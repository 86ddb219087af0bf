# Generated from solutions/02_cupy_kernels.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/02_cupy_kernels.ipynb (02 用 CuPy 写 Kernel：寄存器、占用率与 Block 大小).

Each block below is one `#| export` cell of that notebook, in order."""

import functools

import numpy as np

SEED_VEC_ADD_SRC = r"""
extern "C" __global__ void vecAdd(float* A, float* B, float* C, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        C[i] = A[i] + B[i];
    }
}
"""


@functools.cache
def raw_kernel(source: str, name: str):
    """The CuPy ``RawKernel`` ``name`` of ``source``, made once: NVRTC compiles it on first use (needs a GPU)."""
    import cupy as cp

    return cp.RawKernel(source, name)


def check_f32(*arrays) -> int:
    """Refuse anything but contiguous 1-D float32 arrays of one length (the C kernels read float*); their length."""
    for x in arrays:
        if x.dtype != np.float32 or x.ndim != 1 or not x.flags.c_contiguous:
            raise ValueError(f"need contiguous 1-D float32 arrays, got {x.dtype} {x.shape}")
    sizes = {x.size for x in arrays}
    if len(sizes) != 1:
        raise ValueError(f"arrays differ in length: {[x.size for x in arrays]}")
    return sizes.pop()


import numpy as np


def vec_add_cupy_raw(a, b, c=None, block: int = 256):
    """The seed's kernel through CuPy: ``vecAdd<<<(N+block-1)/block, block>>>(a, b, c, N)``; returns c."""
    import cupy as cp

    c = cp.empty_like(a) if c is None else c
    n = check_f32(a, b, c)
    grid = max(1, (n + block - 1) // block)
    raw_kernel(SEED_VEC_ADD_SRC, "vecAdd")((grid,), (block,), (a, b, c, np.int32(n)))  # int N: np.int32
    return c


import functools


@functools.cache
def elementwise_add():
    """``c = a + b`` as a CuPy ``ElementwiseKernel``: CuPy writes the index, the bounds check and the grid."""
    import cupy as cp

    return cp.ElementwiseKernel("float32 a, float32 b", "float32 c", "c = a + b", "vec_add_ew")


def vec_add_cupy_elementwise(a, b, c=None):
    """``c = a + b`` with :func:`elementwise_add`; returns c."""
    kernel = elementwise_add()
    return kernel(a, b) if c is None else kernel(a, b, c)


def blocks_per_sm(block: int, regs_per_thread: int, limits) -> int:
    """Resident blocks per SM of a kernel with no shared memory: the smallest of the limits set by threads,
    blocks and registers per SM (0 when one block cannot launch)."""
    if block > limits.max_threads_per_block:
        return 0
    warps = -(-block // limits.warp_size)  # whole warps, rounded up
    by_threads = limits.max_threads_per_sm // limits.warp_size // warps
    unit = limits.reg_alloc_unit
    regs_per_warp = -(-regs_per_thread * limits.warp_size // unit) * unit
    warps_by_regs = (limits.regs_per_sm // limits.sub_partitions // regs_per_warp) * limits.sub_partitions
    return min(by_threads, limits.max_blocks_per_sm, warps_by_regs // warps)


import functools

MANY_REGS_SRC = r"""
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
"""


@functools.cache
def many_regs_kernels():
    """(unbounded, bounded): ``manyRegs`` as compiled freely, and with ``__launch_bounds__(1024)`` (needs a GPU)."""
    return (
        raw_kernel(MANY_REGS_SRC.replace("BOUNDS", ""), "manyRegs"),
        raw_kernel(MANY_REGS_SRC.replace("BOUNDS", "__launch_bounds__(1024)"), "manyRegs"),
    )


from numba import cuda


@cuda.jit
def vec_add_two(a, b, c, n):
    """c = a + b with two elements per thread: block k owns the tile of 2 * blockDim elements starting at
    2 * blockDim * k; thread t adds elements i and i + blockDim of it (i = tile start + t), so each access of
    a warp is 32 consecutive floats. Launch with ceil(n / (2 * block)) blocks; each element is bounds-checked."""
    bd = cuda.blockDim.x
    i = cuda.blockIdx.x * 2 * bd + cuda.threadIdx.x
    if i + bd < n:  # both elements inside: the four loads first, then the two stores
        a0 = a[i]
        a1 = a[i + bd]
        b0 = b[i]
        b1 = b[i + bd]
        c[i] = a0 + b0
        c[i + bd] = a1 + b1
    elif i < n:  # the last, partial tile: only the first element is inside
        c[i] = a[i] + b[i]


import numpy as np

FAST_VEC_ADD_SRC = r"""
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
"""


def cupy_fast_grid(n: int, block: int = 256) -> int:
    """The full grid of the float4 kernel: one thread per group of four elements (the last group may be
    shorter), ceil(ceil(n / 4) / block) blocks, at least one."""
    if block < 1 or n < 0:
        raise ValueError(f"need block >= 1 and n >= 0, not block={block}, n={n}")
    groups = (n + 3) // 4
    return max(1, (groups + block - 1) // block)


def aligned16(*arrays) -> bool:
    """True when every array starts on a 16-byte boundary (what a float4 load needs)."""
    return not any(x.data.ptr % 16 for x in arrays)


def vec_add_cupy_fast(a, b, c=None, block: int = 256):
    """The float4 kernel, one float4 per thread over the full grid (:func:`cupy_fast_grid`); returns c.

    A view that does not start on a 16-byte boundary falls back to the seed's kernel rather than fault."""
    import cupy as cp

    c = cp.empty_like(a) if c is None else c
    n = check_f32(a, b, c)
    if not aligned16(a, b, c):
        return vec_add_cupy_raw(a, b, c, block)
    raw_kernel(FAST_VEC_ADD_SRC, "vecAddFast")((cupy_fast_grid(n, block),), (block,), (a, b, c, np.int64(n)))
    return c


from numba import cuda

ELEMENTS_PER_THREAD = 4


@cuda.jit
def vec_add_fast(a, b, c, n):
    """Block-tile vecAdd: each thread adds four elements, the grid covers the whole array (no loop).

    Block ``k`` owns the tile of ``4 * blockDim`` elements starting at ``4 * blockDim * k``; thread ``t`` takes
    elements i, i + bd, i + 2bd, i + 3bd of it (i = tile start + t, bd = blockDim), so every access of a warp is
    still 32 consecutive floats. All eight loads are issued before the first store. The last, partial tile
    takes the checked path.
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


def fast_launch_grid(n: int, block: int = 256) -> int:
    """The full grid of :func:`vec_add_fast`: ceil(n / (4 * block)) blocks (at least one), so that every
    element has a thread and every block a full tile except perhaps the last."""
    if block < 1:
        raise ValueError(f"block must be >= 1, not {block}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    per_block = ELEMENTS_PER_THREAD * block
    return max(1, (n + per_block - 1) // per_block)


def check_lengths(d_a, d_b, d_c) -> int:
    """The common length of three device arrays; a clear error when they differ."""
    n = d_c.size
    if not d_a.size == d_b.size == n:
        raise ValueError(f"arrays differ in length: {d_a.size}, {d_b.size}, {n}")
    return n


def vec_add_fast_launch(d_a, d_b, d_c, block: int = 256, grid: int | None = None) -> int:
    """Launch :func:`vec_add_fast` over device arrays with the full grid; returns the grid used.

    ``grid`` defaults to :func:`fast_launch_grid`; a smaller one would leave elements unwritten (the kernel has
    no loop), so it is refused."""
    n = check_lengths(d_a, d_b, d_c)
    full = fast_launch_grid(n, block)
    if grid is None:
        grid = full
    elif grid < full:
        raise ValueError(
            f"grid of {grid} blocks covers {grid * ELEMENTS_PER_THREAD * block} elements, not {n}: "
            f"vec_add_fast needs {full} blocks of {block}"
        )
    vec_add_fast[grid, block](d_a, d_b, d_c, n)
    return grid


from numba import config, cuda


@cuda.jit
def vec_add_grid_stride(a, b, c, n):
    """Grid-stride vecAdd: a grid of any size (the course uses one wave of resident blocks) walks the array.

    Each trip a thread issues four independent loads from a and four from b (elements i, i+s, i+2s, i+3s with
    s = the grid's thread count, so a warp still reads 32 consecutive floats per access) before its first store.
    The tail that does not fill four strides is finished one element per trip. Correct for every grid size.
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


def one_wave_grid(kernel, block: int = 256) -> int:
    """Blocks for a grid-stride kernel: exactly one wave, SMs x resident blocks per SM.

    More blocks than fit at once would leave a second, partial wave; fewer would leave SM slots empty. The
    resident count is the driver's occupancy answer for the compiled kernel (launch it once first).
    Simulator: 4 blocks (there are no SMs to fill).
    """
    if config.ENABLE_CUDASIM:
        return 4
    if not kernel.overloads:
        raise ValueError(
            "launch the kernel once first: its registers, and so its resident blocks, "
            "are known only once it is compiled"
        )
    compiled = next(iter(kernel.overloads.values()))
    return max(1, compiled.max_cooperative_grid_blocks(block))  # = blocks per SM x SM count


def vec_add_grid_stride_launch(d_a, d_b, d_c, block: int = 256, grid: int | None = None) -> int:
    """Launch :func:`vec_add_grid_stride` over device arrays, by default with a one-wave grid
    (:func:`one_wave_grid`); any ``grid`` >= 1 covers the whole array. Returns the grid used."""
    n = check_lengths(d_a, d_b, d_c)
    if grid is None:
        if not config.ENABLE_CUDASIM and not vec_add_grid_stride.overloads:
            vec_add_grid_stride[1, block](d_a, d_b, d_c, 0)  # compile once so the register count is known
        grid = one_wave_grid(vec_add_grid_stride, block)
    vec_add_grid_stride[grid, block](d_a, d_b, d_c, n)
    return grid


import functools

import numpy as np

GRID_STRIDE_VEC_ADD_SRC = r"""
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
"""


@functools.cache
def cupy_one_wave_grid(device_id: int, block: int) -> int:
    """One wave of the CuPy grid-stride kernel on a device: SMs x the driver's resident blocks per SM (cached:
    the query would otherwise cost tens of microseconds on every launch)."""
    import cupy as cp
    from cupy_backends.cuda.api import driver

    kernel = raw_kernel(GRID_STRIDE_VEC_ADD_SRC, "vecAddGridStride")
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, block, 0)
    return max(1, per_sm) * cp.cuda.Device(device_id).attributes["MultiProcessorCount"]


def vec_add_cupy_grid_stride(a, b, c=None, block: int = 256, grid: int | None = None):
    """The float4 grid-stride kernel, by default with a one-wave grid; returns c. Same 16-byte alignment
    fallback as :func:`vec_add_cupy_fast`."""
    import cupy as cp

    c = cp.empty_like(a) if c is None else c
    n = check_f32(a, b, c)
    if not aligned16(a, b, c):
        return vec_add_cupy_raw(a, b, c, block)
    if grid is None:
        grid = cupy_one_wave_grid(cp.cuda.Device().id, block)
    raw_kernel(GRID_STRIDE_VEC_ADD_SRC, "vecAddGridStride")((grid,), (block,), (a, b, c, np.int64(n)))
    return c
