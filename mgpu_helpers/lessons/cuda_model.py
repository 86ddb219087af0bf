# Generated from solutions/01_cuda_model.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/01_cuda_model.ipynb (01 CUDA 编程模型：用 Numba 写 Kernel).

Each block below is one `#| export` cell of that notebook, in order."""

from numba import cuda


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


import numpy as np


def thread_ids(grid: int, block: int, warp_size: int = 32):
    """What :func:`whoami` writes, computed on the host for all ``grid * block`` threads in launch order:
    ``(block_idx, thread_idx, global_idx, warp, lane)`` as NumPy integer arrays; ``warp`` is the warp's
    number inside its block, ``lane`` the thread's place in its warp."""
    # ✎ np.repeat(np.arange(3), 2) -> [0 0 1 1 2 2]; np.tile(np.arange(2), 3) -> [0 1 0 1 0 1]
    block_idx = np.repeat(np.arange(grid), block)
    thread_idx = np.tile(np.arange(block), grid)
    global_idx = block_idx * block + thread_idx
    return block_idx, thread_idx, global_idx, thread_idx // warp_size, thread_idx % warp_size


def work_and_idle(grid: int, block: int, n: int) -> tuple[int, int, int]:
    """For ``kernel[grid, block]`` over ``n`` elements: ``(work, idle, no_thread)``: threads that pass
    ``if i < n``, threads the check stops, and elements that no thread reaches (the grid is too small)."""
    total = grid * block
    return min(n, total), max(0, total - n), max(0, n - total)


def launch_config(n: int, block: int = 256) -> tuple[int, int]:
    """The launch shape for n elements and any block size: (blocks, threads per block).

    Enough blocks that blocks * block >= n (at least one); the last block may have idle threads, which the
    kernel's bounds check keeps away from memory past the end.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, not {block}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    return max(1, (n + block - 1) // block), block


import numpy as np
from numba import cuda

# float32 constants: a bare 0.999 would be a float64 literal and turn the whole loop into float64 arithmetic.
MUL, ADD, HALF, EIGHTH = np.float32(0.999), np.float32(0.25), np.float32(0.5), np.float32(0.125)


@cuda.jit
def branch_work(out, iters, warp_uniform):
    """SIMT demo: half the threads take path A, half path B, with the same work per thread either way.

    ``warp_uniform`` false: the choice is threadIdx.x's parity, so every warp holds both kinds of thread and
    runs path A and then path B with half its lanes masked each time. True: the choice is the warp's parity, so
    each warp runs one path only. On a GPU the multiply-adds are fused (FMA), so results differ from NumPy's
    in the last bits.
    """
    i = cuda.grid(1)
    if i >= out.size:
        return
    key = cuda.threadIdx.x // cuda.warpsize if warp_uniform else cuda.threadIdx.x
    x = out[i]
    if key % 2 == 0:
        for _ in range(iters):
            x = x * MUL + ADD  # path A: multiply-add
    else:
        for _ in range(iters):
            x = x * x * HALF + EIGHTH  # path B: square, then multiply-add
    out[i] = x


def branch_reference(x0, iters: int, warp_uniform: bool, block: int, index=None):
    """What :func:`branch_work` computes, in NumPy (float32, unfused multiply-adds).

    ``x0``: the starting values; ``index``: their global thread indices (default 0..len-1), so a sample of a
    large launch can be checked without computing all of it."""
    t = (np.arange(x0.size) if index is None else np.asarray(index)) % block
    key = t // 32 if warp_uniform else t
    x = x0.astype(np.float32).copy()
    a, b = key % 2 == 0, key % 2 == 1
    for _ in range(iters):
        x[a] = x[a] * MUL + ADD
        x[b] = x[b] * x[b] * HALF + EIGHTH
    return x


from numba import cuda


@cuda.jit
def vec_add(a, b, c, n):
    """The seed's vecAdd: one thread per element, threads past the end do nothing."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < n:
        c[i] = a[i] + b[i]


import time

import numpy as np
from numba import cuda


def vec_add_numba(h_a, h_b, block: int = 256, kernel=None):
    """The seed's ``main()`` in Numba: allocate on the device, copy in, launch, copy back.

    ``h_a``, ``h_b``: 1-D host arrays of one length and dtype; ``kernel`` defaults to :func:`vec_add`.
    Returns ``(h_c, seconds)``: the result and a dict with the seconds of each step (``alloc_s``,
    ``copy_in_s``, ``kernel_s``, ``copy_out_s``) and of NumPy's ``a + b`` on the host (``numpy_s``).
    """
    if h_a.shape != h_b.shape or h_a.ndim != 1:
        raise ValueError(f"need two 1-D arrays of one length, got {h_a.shape} and {h_b.shape}")
    kernel = vec_add if kernel is None else kernel
    n = h_a.size
    grid, block = launch_config(n, block)
    marks = [time.perf_counter()]

    def mark():  # wait for the GPU, then note the time
        cuda.synchronize()
        marks.append(time.perf_counter())

    d_a = cuda.device_array(n, dtype=h_a.dtype)  # cudaMalloc(&d_A, N * sizeof(float))
    d_b = cuda.device_array(n, dtype=h_b.dtype)
    d_c = cuda.device_array(n, dtype=h_a.dtype)
    mark()
    d_a.copy_to_device(h_a)  # cudaMemcpy(d_A, h_A, ..., cudaMemcpyHostToDevice)
    d_b.copy_to_device(h_b)
    mark()
    kernel[grid, block](d_a, d_b, d_c, n)  # vecAdd<<<(N+255)/256, 256>>>(d_A, d_B, d_C, N)
    mark()
    h_c = d_c.copy_to_host()  # cudaMemcpy(h_C, d_C, ..., cudaMemcpyDeviceToHost)
    mark()
    t0 = time.perf_counter()
    np.add(h_a, h_b)
    numpy_s = time.perf_counter() - t0
    steps = ("alloc_s", "copy_in_s", "kernel_s", "copy_out_s")
    seconds = {name: marks[k + 1] - marks[k] for k, name in enumerate(steps)}
    seconds["numpy_s"] = numpy_s
    return h_c, seconds


from numba import cuda

MAX_THREADS_PER_BLOCK = 1024


def check_launch(grid: int, block: int, max_threads_per_block: int = MAX_THREADS_PER_BLOCK) -> None:
    """Refuse a launch configuration the hardware will refuse, with a message that says why.

    The same check on every machine: the CUDA simulator does not enforce the 1024-threads-per-block limit,
    a real GPU does (the driver returns CUDA_ERROR_INVALID_VALUE; the C runtime's cudaGetLastError() says
    cudaErrorInvalidValue on CUDA 13.0, cudaErrorInvalidConfiguration on older versions)."""
    if not 1 <= block <= max_threads_per_block:
        raise ValueError(f"每个 Block {block} 个线程：一个 Block 只能有 1..{max_threads_per_block} 个线程")
    if grid < 1:
        raise ValueError(f"Grid 有 {grid} 个 Block：至少要启动 1 个 Block")


def launch_checked(kernel, grid: int, block: int, *args) -> None:
    """Check the configuration, launch, then synchronize, so that an error raised while the kernel runs
    surfaces at this call and not at some later, unrelated one."""
    check_launch(grid, block)
    kernel[grid, block](*args)
    cuda.synchronize()


from numba import cuda


@cuda.jit
def vec_add_unchecked(a, b, c):
    """vecAdd WITHOUT the bounds check: every launched thread touches a[i], b[i], c[i]. Do not copy."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c[i] = a[i] + b[i]


import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ASYNC_CHILD = """import torch

x = torch.arange(10, device="cuda")
idx = torch.tensor([3, 12], device="cuda")     # 12 is past the end of x (10 elements)
y = x[idx]                                     # the bad index
w = torch.ones(1000, device="cuda").cumsum(0)  # an unrelated kernel
print("the host went on past the bad index", flush=True)
total = float(w[-1])                           # one number back to the host
print("total =", total)
"""


def raised_at(stderr: str) -> tuple[int, str] | None:
    """The line of async_child.py that the last traceback in ``stderr`` points at: (number, its source)."""
    hits = re.findall(r'File "[^"]*async_child\.py", line (\d+)', stderr)
    if not hits:
        return None
    n = int(hits[-1])
    return n, ASYNC_CHILD.splitlines()[n - 1].split("#")[0].strip()


def run_async_child(blocking: bool) -> subprocess.CompletedProcess:
    """Run async_child.py in a fresh process (CUDA_LAUNCH_BLOCKING=1 when ``blocking``); return the finished
    process: its exit code, what it printed (``stdout``) and its traceback (``stderr``)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_LAUNCH_BLOCKING"}
    if blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"  # set before the child starts CUDA
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "async_child.py")
        path.write_text(ASYNC_CHILD, encoding="utf-8")
        return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
