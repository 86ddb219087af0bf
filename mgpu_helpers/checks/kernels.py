"""The checker of ex01's 2D Numba kernel (the matrix add); 01's other checks are in checks.cuda_model."""

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.checks.cuda_model import run_kernel

SWAPPED = "有元素没被写：x 方向（blockIdx.x、threadIdx.x）对应列 col，y 方向对应行 row，别弄反。"


def check_matrix_add(kernel) -> None:
    """2D vecAdd ``kernel(a, b, c, rows, cols)`` on a 2D grid, x along columns, y along rows (via ``run_kernel``)."""
    from numba import cuda

    what = "二维 Kernel 要从 (x, y) 算出 (row, col) 并对两个方向做边界检查"
    rng = core.new_rng()
    # a side that leaves idle threads in its last block, every run
    not_mult8 = lambda lo, hi: int(rng.choice([v for v in range(lo, hi) if v % 8]))
    shapes = [(not_mult8(3, 14), not_mult8(15, 26)), (not_mult8(15, 24), not_mult8(2, 8)), (5, 13)]
    for rows, cols in shapes:
        block, grid = (8, 8), ((cols + 7) // 8, (rows + 7) // 8)  # x covers the columns, y the rows
        shape = (grid[1] * 8 + 2, grid[0] * 8 + 3)  # every launched thread's (row, col) lies inside
        a, b = core.int_values(rng, shape), core.int_values(rng, shape)
        d_c = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
        run_kernel(kernel, what, grid, block, cuda.to_device(a), cuda.to_device(b), d_c, np.int32(rows), np.int32(cols))
        got = d_c.copy_to_host()
        where = f"矩阵 {rows} 行 x {cols} 列，grid {grid}，block {block}"
        inside = (np.arange(shape[0])[:, None] < rows) & (np.arange(shape[1])[None, :] < cols)
        outside = np.argwhere(~np.isnan(got) & ~inside)
        if outside.size:
            r, cc = (int(v) for v in outside[0])
            raise core.CheckFailed(
                f"{where}：元素 [{r}, {cc}] 在矩阵之外（合法范围 row < {rows}、col < {cols}），却被写了。"
                "两个方向都要检查：row < rows 并且 col < cols。"
            )
        swapped = np.isnan(got[:rows, :cols]).any() and rows != cols  # an element not written: x and y swapped?
        core.compare(got[:rows, :cols], a[:rows, :cols] + b[:rows, :cols], where, SWAPPED if swapped else "")
    core.passed(
        "二维 Kernel 在 " + "、".join(f"{r}x{c}" for r, c in shapes) + " 的矩阵上与 NumPy 一致，矩阵外没有被写。"
    )
