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


# --------------------------------------------------------------------------------------------------------
# ex02: a CuPy RawKernel, the occupancy arithmetic, one wave of blocks on this machine.

SKIPPED = "跳过"


def skipped(text: str) -> None:
    """Say that a check could not run here and why: it is not a pass."""
    print(f"{SKIPPED}：{text}")


def cupy_usable() -> bool:
    """True when CuPy can reach a GPU (CuPy imports without one, but every allocation then fails)."""
    try:
        import cupy
        from cupy_backends.cuda.api.runtime import CUDARuntimeError
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except CUDARuntimeError:
        return False


def check_saxpy_cupy(fn) -> None:
    """``fn(alpha, x, y)``: ``y <- alpha * x + y`` with a CuPy ``RawKernel`` on 1-D float32 CuPy arrays, returns y.

    Needs a GPU: without one the stub still fails, and a written function is reported as not checked."""
    what = "saxpy_cupy 要用 RawKernel 算出 alpha * x + y"
    if has_stub(fn):
        raise not_done(fn, what)
    if not cupy_usable():
        skipped("这个检查需要 GPU：CuPy 要用 CUDA 驱动编译并启动你的 Kernel，这台机器上没有 GPU。"
                "你的 saxpy_cupy 还没有被运行过，也就还没有被检查；在有 GPU 的机器上重新运行这一格。")
        return
    import cupy as cp

    rng = new_rng()
    sizes = [1, int(rng.integers(2, 255)), int(rng.integers(257, 5000)), 256 * int(rng.integers(2, 9))]
    for n in sizes:
        alpha = float(rng.choice([0.5, -1.25, 2.0, 3.5]))      # exact in float32: sums stay exact
        x = int_values(rng, n)
        y0 = int_values(rng, n + PAD)
        d_x = cp.asarray(x)
        d_buf = cp.asarray(y0)
        where = f"n = {n}，alpha = {alpha}"
        try:
            got = call(fn, what, alpha, d_x, d_buf[:n])
            cp.cuda.Device().synchronize()
        except CheckFailed:
            raise
        except Exception as exc:
            raise CheckFailed(f"{where}：运行出错（{type(exc).__name__}：{str(exc).splitlines()[0]}）。") from None
        buf = cp.asnumpy(d_buf)
        if not np.array_equal(buf[n:], y0[n:]):
            k = n + int(np.flatnonzero(buf[n:] != y0[n:])[0])
            raise CheckFailed(f"{where}：下标 {k} 已经超出 n（最后一个合法下标是 {n - 1}），却被写了。"
                              "Kernel 里要有边界检查 if (i < n)。")
        want = alpha * x + y0[:n]
        got = cp.asnumpy(got) if got is not None else None
        hint = ""
        if got is not None and np.shape(got) == want.shape and np.mean(np.isclose(got, want)) < 0.5:
            hint = ("所有元素都不对：参数要按 C 的类型传，float alpha 传 np.float32(alpha)、int n 传 np.int32(n)；"
                    "Python 的 float 会按 8 字节的 double 传过去。")
        compare(got, want, where, hint)
    passed(f"saxpy_cupy 在 n = {', '.join(str(n) for n in sizes)} 上与 NumPy 一致，n 之后的元素没有被碰。")


def _occupancy_cases(rng):
    from mgpu_helpers.models import occupancy as occ

    ampere = occ.SmLimits(max_threads_per_sm=1536, max_blocks_per_sm=16, sm_count=84)   # compute capability 8.6
    named = {"H200 (计算能力 9.0)": occ.HOPPER, "计算能力 8.6（每 SM 1536 线程、16 个 Block）": ampere}
    cases = [(256, 32), (128, 33), (64, 40), (32, 16), (1024, 64), (1024, 65), (256, 167), (100, 16), (1025, 16)]
    cases += [(int(rng.integers(1, 1025)), int(rng.integers(1, 256))) for _ in range(40)]
    cases += [(32 * int(rng.integers(1, 33)), int(rng.integers(1, 256))) for _ in range(40)]
    return [(b, r, name, lim) for name, lim in named.items() for b, r in cases]


def check_blocks_per_sm(fn) -> None:
    """``fn(block, regs_per_thread, limits) -> int``: resident blocks per SM (no shared memory), against the
    occupancy model (:func:`mgpu_helpers.models.occupancy.occupancy`) for two kinds of SM."""
    from mgpu_helpers.models import occupancy as occ

    what = "blocks_per_sm 要算出每个 SM 同时驻留几个 Block"
    cases = _occupancy_cases(new_rng())
    for block, regs, name, lim in cases:
        got = call(fn, what, block, regs, lim)
        want = occ.occupancy(block, regs, limits=lim)
        if got != want.blocks_per_sm:
            warps = -(-block // lim.warp_size)
            per_warp = -(-regs * lim.warp_size // lim.reg_alloc_unit) * lim.reg_alloc_unit
            raise CheckFailed(
                f"{name}，block = {block}，每线程 {regs} 个寄存器：应当是 {want.blocks_per_sm} 个 Block/SM"
                f"（最先用完的是 {want.limiter.split(':')[0]}），你的函数返回 {got!r}。"
                f"这个 Block 占 {warps} 个 Warp；每个 Warp 的寄存器取整后是 {per_warp} 个。")
    passed(f"blocks_per_sm 在 {len(cases)} 组（block、寄存器、SM 上限）上与占用率模型一致。")


def one_wave_facts() -> dict:
    """What this machine says about the Numba grid-stride kernel of notebook 02 at block 256: SM count,
    registers per thread, per-SM limits, and where the numbers come from."""
    from mgpu_helpers.measure import gpu_limits
    from mgpu_helpers.measure.timing import simulator
    from mgpu_helpers.models import occupancy as occ

    limits = gpu_limits.device_limits()
    regs = None
    if not simulator():
        regs = _compiled_grid_stride_regs()
    if regs is None:
        return {"sm_count": limits.sm_count, "regs_per_thread": 32, "limits": occ.HOPPER,
                "source": "没有 GPU：按 H200 的上限（132 个 SM）、每线程 32 个寄存器计算"
                          "（寄存器在 32 个以内时答案相同：先用完的是线程数）"}
    return {"sm_count": limits.sm_count, "regs_per_thread": regs, "limits": limits,
            "source": "这台机器的 GPU：SM 数与上限从设备读出，寄存器数来自编译好的 vec_add_grid_stride"}


def _compiled_grid_stride_regs() -> int:
    from numba import cuda

    from mgpu_helpers.lessons import cupy_kernels
    from mgpu_helpers.measure import gpu_limits

    d = cuda.device_array(4, dtype=np.float32)
    cupy_kernels.vec_add_grid_stride_launch(d, d, d)      # compiles it, so its registers are known
    cuda.synchronize()
    return gpu_limits.numba_regs_per_thread(cupy_kernels.vec_add_grid_stride)


def check_one_wave_blocks(fn) -> None:
    """``fn(sm_count, regs_per_thread, limits) -> int``: the learner's number of blocks in one wave of the
    grid-stride kernel at block 256 on this machine, against the driver's answer for the compiled kernel
    (GPU) or the occupancy model (no GPU)."""
    from mgpu_helpers.measure.timing import simulator
    from mgpu_helpers.models import occupancy as occ

    what = "one_wave_blocks 要给出一波有几个 Block"
    facts = one_wave_facts()
    got = call(fn, what, facts["sm_count"], facts["regs_per_thread"], facts["limits"])
    per_sm = occ.occupancy(256, facts["regs_per_thread"], limits=facts["limits"]).blocks_per_sm
    model = per_sm * facts["sm_count"]
    if simulator():
        want, by = model, "占用率模型"
    else:
        from mgpu_helpers.lessons import cupy_kernels
        want, by = cupy_kernels.one_wave_grid(cupy_kernels.vec_add_grid_stride, 256), "驱动的占用率查询"
    if got != want:
        hint = ""
        if got == facts["sm_count"]:
            hint = f"{got} 是 SM 的个数；每个 SM 同时驻留 {per_sm} 个 Block，还要乘上它。"
        elif got == per_sm:
            hint = f"{got} 是每个 SM 驻留的 Block 数；一波要让全部 {facts['sm_count']} 个 SM 都坐满。"
        elif isinstance(got, (int, np.integer)) and got == facts["sm_count"] * (2048 // 256):
            hint = "只按线程数算了；再看看寄存器和 Block 数的上限。"
        raise CheckFailed(f"block = 256，{facts['source']}：一波应当是 {want} 个 Block（{by}），"
                          f"你的答案是 {got!r}。{hint}".rstrip())
    passed(f"一波是 {want} 个 Block（{facts['sm_count']} 个 SM × 每 SM {want // facts['sm_count']} 个），"
           f"与{by}一致。")
