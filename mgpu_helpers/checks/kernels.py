"""Checkers for CUDA kernels in Numba (the simulator on a CPU, the GPU otherwise): ex01's matrix add and the
earlier 1-D ones, then ex02's. Notebook 01's fill-ins and ex01's newer exercises are in checks.cuda_model."""
from __future__ import annotations

import random

import numpy as np

from mgpu_helpers.checks.core import CheckFailed, not_done, has_stub, passed, call, compare, int_values, new_rng


def check_launch_shape(fn) -> None:
    """``fn(n, block) -> (blocks, idle)``: blocks for ``n`` elements, and threads left without an element."""
    what = "launch_shape 要算出 Block 数和空闲线程数"
    rng = random.Random()
    cases = [(1, 256), (256, 256), (257, 256), (1000, 128)]
    cases += [(rng.randint(1, 10 ** 7), rng.choice([32, 64, 100, 128, 256, 512, 1024])) for _ in range(50)]
    for n, block in cases:
        got = call(fn, what, n, block)
        blocks = (n + block - 1) // block
        want = (blocks, blocks * block - n)
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailed(f"n = {n}, block = {block}：应当返回 (blocks, idle) 两个整数，实际返回 {got!r}。")
        if tuple(int(v) for v in got) != want:
            hint = ""
            if got[0] == n // block and n % block:
                hint = f" 向下取整丢掉了最后 {n % block} 个元素：要向上取整，(n + block - 1) // block。"
            raise CheckFailed(f"n = {n}, block = {block}：应当是 {want[0]} 个 Block、{want[1]} 个空闲线程，"
                              f"实际得到 {tuple(got)}。{hint}".rstrip())
    passed(f"launch_shape 在 {len(cases)} 组 (n, block) 上都对。")


PAD = 7   # extra elements after the data: a missing or off-by-one bounds check writes into them


def _kernel_stub(kernel, what):
    if has_stub(kernel):
        raise not_done(kernel, what)


def _launch(kernel, what, grid, block, *args):
    """Launch and wait: a loop that never ends is refused or stopped within seconds (see checks.cuda_model)."""
    from mgpu_helpers.checks.cuda_model import run_kernel

    run_kernel(kernel, what, grid, block, *args)


def _check_1d(kernel, what, n, block, grid, hint_stride=False):
    from numba import cuda

    rng = new_rng()
    a = int_values(rng, n + PAD)
    b = int_values(rng, n + PAD)
    c = np.full(n + PAD, np.nan, dtype=np.float32)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    _launch(kernel, what, grid, block, d_a, d_b, d_c, np.int32(n))
    got = d_c.copy_to_host()
    where = f"n = {n}，启动 [{grid}, {block}]"
    written_past = np.flatnonzero(~np.isnan(got[n:]))
    if written_past.size:
        k = n + int(written_past[0])
        raise CheckFailed(f"{where}：下标 {k} 已经超出 n（最后一个合法下标是 {n - 1}），却被写了。"
                          "边界检查应当是 i < n（不是 i <= n）。")
    hint = ""
    if hint_stride and np.isnan(got[grid * block:n]).any():
        hint = (f"只有前 {grid * block} 个元素被处理：每个线程要从 cuda.grid(1) 开始、"
                "每次加 cuda.gridsize(1)，一直循环到 n。")
    compare(got[:n], a[:n] + b[:n], where, hint)


def _check_once(kernel, what, n, block, grid):
    """c is a itself here: an element added twice comes out as a + 2b, so every element must be done once."""
    from numba import cuda

    rng = new_rng()
    a = int_values(rng, n + PAD)
    b = rng.integers(1, 10, n + PAD).astype(np.float32)
    d_a = cuda.to_device(a)
    _launch(kernel, what, grid, block, d_a, cuda.to_device(b), d_a, np.int32(n))
    times = np.rint((d_a.copy_to_host()[:n] - a[:n]) / b[:n]).astype(np.int64)
    if (times != 1).any():
        k = int(np.flatnonzero(times != 1)[0])
        raise CheckFailed(f"n = {n}，启动 [{grid}, {block}]：元素 {k} 被计算了 {int(times[k])} 次，应当恰好 1 次。"
                          "起点要是 cuda.grid(1)，步长要是整个 Grid 的线程数 cuda.gridsize(1)。")


def check_vec_add(kernel) -> None:
    """The seed's vecAdd: ``kernel(a, b, c, n)`` with one thread per element and ``if i < n``."""
    what = "vecAdd Kernel 要算出全局下标并做边界检查"
    _kernel_stub(kernel, what)
    rng = random.Random()
    cases = [(rng.randint(1, 31), 32), (rng.randint(65, 250), 64), (rng.choice([128, 256]), 64)]
    for n, block in cases:
        _check_1d(kernel, what, n, block, (n + block - 1) // block)
    passed(f"vecAdd 在 n = {', '.join(str(n) for n, _ in cases)} 上与 NumPy 一致，n 之后的元素没有被碰。")


def check_grid_stride_add(kernel) -> None:
    """Grid-stride vecAdd: ``kernel(a, b, c, n)`` is right whatever the grid, even one much smaller than n."""
    what = "grid-stride vecAdd 要让每个线程循环处理多个元素"
    _kernel_stub(kernel, what)
    rng = random.Random()
    cases = [(rng.randint(150, 400), 32, 2), (rng.randint(5, 40), 32, 2), (rng.randint(100, 300), 64, 1)]
    for n, block, grid in cases:
        _check_1d(kernel, what, n, block, grid, hint_stride=True)
        _check_once(kernel, what, n, block, grid)
    passed("grid-stride vecAdd 在比线程数多和少的 n 上都与 NumPy 一致："
            + ", ".join(f"n = {n} 用 {g}x{b} 个线程" for n, b, g in cases) + "。")


def check_matrix_add(kernel) -> None:
    """2D vecAdd: ``kernel(a, b, c, rows, cols)`` launched on a 2D grid, x along columns, y along rows."""
    from numba import cuda

    what = "二维 Kernel 要从 (x, y) 算出 (row, col) 并对两个方向做边界检查"
    _kernel_stub(kernel, what)
    rng = new_rng()
    def not_mult8(lo, hi):                  # a side that leaves idle threads in its last block, every run
        return int(rng.choice([v for v in range(lo, hi) if v % 8]))

    shapes = [(not_mult8(3, 14), not_mult8(15, 26)), (not_mult8(15, 24), not_mult8(2, 8)), (5, 13)]
    for rows, cols in shapes:
        block = (8, 8)
        grid = ((cols + 7) // 8, (rows + 7) // 8)     # x covers the columns, y the rows
        shape = (grid[1] * 8 + 2, grid[0] * 8 + 3)    # every launched thread's (row, col) lies inside
        a = int_values(rng, shape)
        b = int_values(rng, shape)
        c = np.full(shape, np.nan, dtype=np.float32)
        d_c = cuda.to_device(c)
        _launch(kernel, what, grid, block, cuda.to_device(a), cuda.to_device(b), d_c, np.int32(rows), np.int32(cols))
        got = d_c.copy_to_host()
        where = f"矩阵 {rows} 行 x {cols} 列，grid {grid}，block {block}"
        inside = (np.arange(shape[0])[:, None] < rows) & (np.arange(shape[1])[None, :] < cols)
        outside = np.argwhere(~np.isnan(got) & ~inside)
        if outside.size:
            r, cc = (int(v) for v in outside[0])
            raise CheckFailed(f"{where}：元素 [{r}, {cc}] 在矩阵之外（合法范围 row < {rows}、col < {cols}），却被写了。"
                              "两个方向都要检查：row < rows 并且 col < cols。")
        missing = np.argwhere(np.isnan(got[:rows, :cols]))
        hint = ""
        if missing.size and rows != cols:
            hint = "有元素没被写：x 方向（blockIdx.x、threadIdx.x）对应列 col，y 方向对应行 row，别弄反。"
        compare(got[:rows, :cols], a[:rows, :cols] + b[:rows, :cols], where, hint)
    passed("二维 Kernel 在 " + "、".join(f"{r}x{c}" for r, c in shapes) + " 的矩阵上与 NumPy 一致，矩阵外没有被写。")
