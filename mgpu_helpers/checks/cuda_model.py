"""Checkers for notebook 01's fill-ins and for ex01: the thread map, the launch arithmetic, Numba kernels.

Kernels run on fresh random inputs with the edge cases in every run, into arrays longer than the data and
pre-filled with a sentinel, so that a write past the end is seen (a GPU would not say a word).

An answer that never ends is reported within seconds: before launching, :func:`stuck_loop` refuses a ``while``
loop whose body assigns none of the names its condition reads; in the simulator every launch also runs under
:func:`watchdog`, so the cell ends and the kernel session stays usable. On a GPU no watchdog exists: a kernel that
loops for ever keeps the GPU busy until the Jupyter kernel is restarted, which is why the source check runs first.
"""

import ast
import inspect
import random
import textwrap
import threading
import time
from contextlib import contextmanager, nullcontext

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.measure.timing import simulator

LESSON = "mgpu_helpers.lessons.cuda_model"  # the course's own versions of 01's fill-ins
PAD = 5  # sentinel elements after the data (01's and 02's kernel checks): a missing bounds check writes into them
WATCHDOG_S = 5.0  # seconds a kernel may run in the simulator before it is stopped


class KernelTimeout(Exception):
    """A simulated kernel ran past the watchdog's deadline."""


def stuck_loop(kernel) -> str | None:
    """A ``while`` loop of the kernel whose body assigns none of the names its condition reads, as text
    ('第 N 行 `while i < n:`'), or None (also when the source cannot be read)."""
    try:
        src = textwrap.dedent(inspect.getsource(core._inner(kernel)))
        first = core._inner(kernel).__code__.co_firstlineno
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError):
        return None
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.While)):
        body = [n for stmt in node.body for n in ast.walk(stmt)]
        if any(isinstance(n, (ast.Break, ast.Return)) for n in body):
            continue  # the loop has a way out
        reads = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        written = {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if reads and not reads & written:
            return f"第 {first + node.lineno - 1} 行 `{src.splitlines()[node.lineno - 1].strip()}`"
    return None


@contextmanager
def watchdog(kernel):
    """While active, every simulator thread started runs ``kernel``'s lines under a deadline: past it the
    thread raises :class:`KernelTimeout` with the line and its local values (the simulator then re-raises it
    at the launch). Only the kernel's own frames are traced, so other code runs at full speed."""
    code, deadline = core._inner(kernel).__code__, time.monotonic() + WATCHDOG_S

    def local(frame, event, arg):
        if event == "line" and time.monotonic() > deadline:
            values = {k: v for k, v in frame.f_locals.items() if isinstance(v, (int, np.integer))}
            shown = "，".join(f"{k} = {int(v)}" for k, v in sorted(values.items()))
            raise KernelTimeout(f"过了 {WATCHDOG_S:g} 秒还在第 {frame.f_lineno} 行（{shown or '没有整数局部变量'}）")
        return local

    threading.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        yield
    finally:
        threading.settrace(None)


def run_kernel(kernel, what: str, grid, block, *args, stream_hint: str = "") -> None:
    """Launch the reader's kernel and wait for it; every way it can go wrong becomes a :class:`CheckFailed`."""
    from numba import cuda

    core.require_written(kernel, what)
    if loop := stuck_loop(kernel):
        raise core.CheckFailed(
            f"{what}：{loop} 的循环体没有改变条件里的任何变量，这个循环永远不会结束"
            f"（在 GPU 上整个 Kernel 会一直占着 GPU）。{stream_hint or '每一轮末尾要让下标前进。'}"
        )
    try:
        with watchdog(kernel) if simulator() else nullcontext():
            kernel[grid, block](*args)
        cuda.synchronize()
    except NotImplementedError:
        raise core.not_done(kernel, what) from None
    except KernelTimeout as exc:
        text = str(exc).split(": ", 1)[-1]
        raise core.CheckFailed(
            f"{what}：Kernel 停不下来，{text}。多半是循环的下标没有前进。{stream_hint}".rstrip()
        ) from None
    except IndexError as exc:
        raise core.CheckFailed(
            f"{what}：有线程越界访问了数组（模拟器报 IndexError：{str(exc).splitlines()[0]}）。"
            "边界检查要挡住所有多出来的线程。"
        ) from None
    except Exception as exc:
        raise core.CheckFailed(
            f"{what}：Kernel 运行出错（{type(exc).__name__}：{str(exc).splitlines()[0]}）。"
        ) from None


def _blocks(n: int, block: int) -> int:
    return max(1, (n + block - 1) // block)


def _whole_numbers(got, want: tuple, where: str, kinds, returns: str, slips) -> None:
    """``got`` must be a ``kinds`` of ``len(want)`` whole numbers equal to ``want``; else the failure, with the hint
    of the first ``(it is this mistake, text)`` of ``slips()`` that holds (called only then: it may index ``got``)."""
    if not isinstance(got, kinds) or len(got) != len(want):
        raise core.CheckFailed(f"{where}：应当返回 {returns}，实际返回 {got!r}。")
    if tuple(int(v) for v in got) != want:
        raise core.CheckFailed(f"{where}：应当是 {want}，实际是 {tuple(got)}。{core.first_hint(*slips())}".rstrip())


def fail_past_end(got, n: int, untouched, where: str, fix: str = "边界检查应当是 i < n（不是 i <= n，也不能省）。"):
    """Fails when an element of ``got`` past the first ``n`` is no longer ``untouched`` (a sentinel, NaN, or the
    values it held): 01's and 02's kernels write past the end when the bounds check is off."""
    bad = np.flatnonzero(~np.isclose(got[n:], untouched, rtol=0, atol=0, equal_nan=True))  # NaN stays NaN
    if bad.size:
        raise core.CheckFailed(
            f"{where}：下标 {n + int(bad[0])} 已经超出 n（最后一个合法下标是 {n - 1}），却被写了。{fix}"
        )


def _reference(name: str):
    """The course's own ``mh.lessons.cuda_model.<name>``: refused as an answer, and the reference it is held to."""
    return core.course_object(f"{LESSON}.{name}")


THREAD_SLIPS = {  # a field computed the typical wrong way (:func:`check_thread_ids`), and what to say
    "global_idx": "乘的是 Block 的个数 grid：要乘每个 Block 的线程数 blockDim.x（这里是 block）。",
    "warp": "Warp 是按全局下标分的：Warp 从不跨 Block，要用块内编号 threadIdx.x // 32。",
    "lane": "lane 用了全局下标：block 不是 32 的倍数时，要用块内编号 threadIdx.x % 32。",
    "block_idx": "Block 号是全局下标除以每个 Block 的线程数 block，不是除以 grid。",
}


def check_thread_ids(fn) -> None:
    """01's thread map, ``fn(grid, block) -> (block_idx, thread_idx, global_idx, warp, lane)``: one entry per
    launched thread, in launch order; ``warp`` is the warp's number inside its block."""
    what = "thread_ids 要算出每个线程的 Block 号、块内编号、全局下标、Warp 和 lane"
    core.refuse_course_code(fn, what, [_reference("thread_ids")], advice="在练习格里自己写出函数体。")
    rng = random.Random()
    cases = [(1, 1), (3, 64), (2, 100), (4, 33), (1, 32), (5, 7)]
    cases += [(rng.randint(1, 6), rng.randint(1, 300)) for _ in range(6)]
    for (grid, block), got in core.answers(fn, what, cases):
        where = f"grid = {grid}, block = {block}"
        shape = f"{where}：应当返回 5 个数组 (block_idx, thread_idx, global_idx, warp, lane)，实际返回 {type(got).__name__}。"
        core.expect_items(got, 5, shape)
        want = _reference("thread_ids")(grid, block)  # the course's thread map is the reference
        for name, g, w in zip(("block_idx", "thread_idx", "global_idx", "warp", "lane"), got, want):
            g = np.asarray(g)
            if g.shape != w.shape:
                raise core.CheckFailed(
                    f"{where}：{name} 应当有 grid * block = {w.size} 个元素（每个线程一个），实际形状是 {g.shape}。"
                )
            if np.array_equal(g, w):
                continue
            k = int(np.flatnonzero(g != w)[0])
            slip = dict(global_idx=want[0] * grid + want[1], warp=want[2] // 32, lane=want[2] % 32)
            slip["block_idx"] = np.arange(grid * block) // max(grid, 1)
            hint = THREAD_SLIPS[name] if name in slip and np.array_equal(g, slip[name]) else ""
            raise core.CheckFailed(
                f"{where}：第 {k} 个线程的 {name} 应当是 {int(w[k])}，实际是 {g[k]!r}。{hint}".rstrip()
            )
    core.passed(f"thread_ids 在 {len(cases)} 种 (grid, block) 上都对，包括 block = 1、33、100 这种不是 32 倍数的情形。")


def check_work_and_idle(fn) -> None:
    """``fn(grid, block, n) -> (work, idle, no_thread)``: threads past ``i < n``, threads stopped, elements missed."""
    what = "work_and_idle 要数出干活的线程、闲置的线程和没有线程的元素"
    core.refuse_course_code(fn, what, [_reference("work_and_idle")], advice="在练习格里自己写出函数体。")
    rng = random.Random()
    cases = [(4, 256, 1000), (3, 64, 150), (2, 256, 1000), (1, 256, 1), (4, 32, 128), (1, 1, 0), (3, 100, 300)]
    cases += [(rng.randint(1, 8), rng.randint(1, 512), rng.randint(0, 3000)) for _ in range(30)]
    for (grid, block, n), got in core.answers(fn, what, cases):
        total = grid * block
        want = (min(n, total), max(0, total - n), max(0, n - total))
        where = f"grid = {grid}, block = {block}, N = {n}"
        too_few = n > total  # fewer threads than elements
        slips = lambda: (
            (got[1] == total - n and too_few, "线程比元素少时没有线程闲置：闲置数不会是负数。"),
            (got[0] == n and too_few, f"只有 {total} 个线程：干活的线程最多这么多，剩下的元素没有线程（no_thread）。"),
            (got[2] != want[2], "no_thread 是 N 比线程总数多出来的部分，线程够时是 0。"),
        )
        _whole_numbers(got, want, where, (tuple, list), "(work, idle, no_thread) 三个整数", slips)
    core.passed(f"work_and_idle 在 {len(cases)} 种 (grid, block, N) 上都对，包括 Grid 太小和 N = 0、1 的情形。")


def check_launch_config(fn) -> None:
    """``fn(n, block=256) -> (blocks, block)``: the fewest blocks that cover n, at least one."""
    what = "launch_config 要向上取整算出 Block 数"
    core.refuse_course_code(fn, what, [_reference("launch_config")], advice="在练习格里自己写出函数体。")
    rng = random.Random()
    cases = [(1, 256), (255, 256), (256, 256), (257, 256), (1000, 256), (150, 64), (0, 128), (7, 1), (33, 32)]
    cases += [(rng.randint(1, 10**7), rng.choice([32, 64, 100, 128, 256, 512, 1024])) for _ in range(40)]
    for (n, block), got in core.answers(fn, what, cases):
        want = (_blocks(n, block), block)
        where = f"n = {n}, block = {block}"
        slips = lambda: (
            (got[0] == n // block and n % block, f" 向下取整丢掉了最后 {n % block} 个元素：要向上取整。"),
            (
                got[0] == n // block + 1 and n % block == 0 and n,
                " n 正好是 block 的整数倍时不需要多一个 Block：n // block + 1 多开了一整块。",
            ),
            (
                n == 0 and got[0] == 0,
                " n = 0 时也要启动 1 个 Block：0 个 Block 的启动会被 CUDA 拒绝，边界检查让它什么也不做。",
            ),
            (got[1] != block, " 第二个数是调用者给的 block，不要换成别的。"),
        )
        returns = "(blocks, block) 两个整数，就像 kernel[blocks, block] 的方括号里写的"
        _whole_numbers(got, want, where, tuple, returns, slips)
    try:
        default = fn(1000)
    except TypeError:
        raise core.CheckFailed(f"{what}：launch_config(1000) 出错了：block 要有默认值 256。") from None
    if tuple(default) != (4, 256):
        raise core.CheckFailed(f"{what}：launch_config(1000) 应当是 (4, 256)（block 默认 256），实际是 {default!r}。")
    core.passed(f"launch_config 在 {len(cases)} 组 (n, block) 上都对，包括 n = 0、1、正好整除和多 1 个元素。")


def check_grid_2d(fn) -> None:
    """ex01: ``fn(rows, cols, block_x, block_y) -> (grid_x, grid_y)``: x along the columns, y along the rows."""
    what = "grid_2d 要按 x 对应列、y 对应行，两个方向分别向上取整"
    rng = random.Random()
    cases = [(3, 5, 8, 8), (16, 16, 8, 8), (17, 9, 8, 8), (1, 1, 16, 16), (100, 30, 32, 8), (7, 200, 16, 4)]
    sides = [(rng.randint(1, 5000), rng.randint(1, 5000)) for _ in range(40)]
    cases += [(rows, cols, rng.choice([4, 8, 16, 32]), rng.choice([1, 2, 4, 8, 16])) for rows, cols in sides]
    for (rows, cols, bx, by), got in core.answers(fn, what, cases):
        want = (_blocks(cols, bx), _blocks(rows, by))
        where = f"{rows} 行 x {cols} 列，block = ({bx}, {by})"
        swapped = ((_blocks(rows, bx), _blocks(cols, by)), (want[1], want[0]))
        slips = lambda: (
            (tuple(got) in swapped, "x、y 弄反了：x 方向（grid_x、block_x）数的是列 cols，y 方向数的是行 rows。"),
            (tuple(got) == (cols // bx, rows // by), "向下取整丢掉了最后不满一个 Block 的那几列或几行：要向上取整。"),
        )
        _whole_numbers(got, want, where, tuple, "(grid_x, grid_y) 两个整数", slips)
    core.passed(f"grid_2d 在 {len(cases)} 种矩阵和 Block 形状上都对。")


REVERSE_SENTINEL = -(2**31)


def check_reverse_copy(kernel, block: int = 32) -> None:
    """``kernel(a, out, n)`` on int32 arrays longer than n: ``out[i] = a[n - 1 - i]`` for i < n."""
    from numba import cuda

    what = "reverse_copy Kernel 要把 a 的前 n 个元素倒着写进 out"
    rng = core.new_rng()
    # n: 1, below a block, a remainder, an exact multiple, random; the arrays reach PAD past the last thread
    sizes = [1, int(rng.integers(2, block)), block * int(rng.integers(1, 4)) + int(rng.integers(1, block))]
    sizes += [block * 2, int(rng.integers(1, 5 * block))]
    launches = [(n, _blocks(n, block), _blocks(n, block) * block + PAD) for n in sizes]
    for n, grid, length in launches:
        a = rng.integers(-(2**30), 2**30, length).astype(np.int32)  # beyond float32's exact integers
        d_out = cuda.to_device(np.full(length, REVERSE_SENTINEL, np.int32))
        run_kernel(kernel, what, grid, block, cuda.to_device(a), d_out, np.int32(n))
        got = d_out.copy_to_host()
        where = f"n = {n}（数组长 {length}），启动 [{grid}, {block}]"
        fail_past_end(got, n, REVERSE_SENTINEL, where)
        want = a[:n][::-1]
        if np.array_equal(got[:n], want):
            continue
        same = lambda v: np.array_equal(got[:n], v)
        hint = core.first_hint(
            (same(a[1 : n + 1][::-1]), "差了一位：最后一个元素是 a[n - 1]，所以 out[i] = a[n - 1 - i]。"),
            (same(a[::-1][:n]), "用了整个数组的长度：数组比 n 长，要用参数 n，不是 a.size 或 len(a)。"),
            (same(a[:n]), "原样拷贝了，没有倒过来。"),
        )
        core.compare(got[:n].astype(np.float64), want.astype(np.float64), where, hint, atol=0, rtol=0)
    core.passed(
        f"reverse_copy 在 n = {', '.join(str(n) for n, _, _ in launches)}（int32，block = {block}）上都对，n 之后的元素没有被碰。"
    )


def check_add_into_grid_stride(kernel) -> None:
    """``kernel(x, y, n)``: ``y[i] += x[i]`` for every i < n exactly once, whatever the grid (grid-stride). ``x``
    holds no zeros, so an element visited twice shows ``y + 2x``: the check counts the visits."""
    from numba import cuda

    what = "grid-stride Kernel 要让每个元素恰好加一次"
    rng = core.new_rng()
    cases = [(1, 32, 2), (int(rng.integers(2, 64)), 32, 2), (int(rng.integers(150, 400)), 32, 2), (64 * 3, 32, 2)]
    cases += [(int(rng.integers(100, 300)), 64, 1), (int(rng.integers(300, 500)), 16, 3)]
    for n, block, grid in cases:
        x = rng.integers(1, 10, n + PAD).astype(np.float64) * rng.choice([-1.0, 1.0], n + PAD)
        y0 = rng.integers(-50, 51, n + PAD).astype(np.float64)
        d_y = cuda.to_device(y0)
        args = (cuda.to_device(x), d_y, np.int32(n))
        run_kernel(kernel, what, grid, block, *args, stream_hint="每一轮末尾要 i += cuda.gridsize(1)。")
        got = d_y.copy_to_host()
        where = f"n = {n}，只有 {grid} x {block} = {grid * block} 个线程"
        if not np.array_equal(got[n:], y0[n:]):
            k = n + int(np.flatnonzero(got[n:] != y0[n:])[0])
            raise core.CheckFailed(f"{where}：下标 {k} 已经超出 n，却被加了。循环条件应当是 i < n。")
        visits = np.rint((got[:n] - y0[:n]) / x[:n]).astype(np.int64)
        if (visits == 1).all() and np.array_equal(got[:n], y0[:n] + x[:n]):
            continue
        k = int(np.argmax(visits != 1))  # the first element not added exactly once
        skipped = (visits == 0).any()
        hint = core.first_hint(
            (
                (visits > 1).any(),
                "有元素被加了不止一次：几个线程走到了同一个下标。起点要是全局下标 cuda.grid(1)，"
                "步长要是整个 Grid 的线程数 cuda.gridsize(1)（不是 blockDim.x、gridDim.x 或 1）。",
            ),
            (skipped, "有元素一次也没有加：每个线程要循环，步长是整个 Grid 的线程数 cuda.gridsize(1)，一直走到 n。"),
        )
        raise core.CheckFailed(
            f"{where}：y[{k}] 应当恰好加一次 x[{k}]，实际加了 {int(visits[k])} 次"
            f"（{int((visits != 1).sum())} 个元素不是恰好一次）。{hint}".rstrip()
        )
    core.passed(
        "grid-stride Kernel 让每个元素恰好加了一次："
        + "，".join(f"n = {n} 用 {g}x{b} 个线程" for n, b, g in cases)
        + "。"
    )


try_thread_ids = core.fill_in_cell(check_thread_ids, f"{LESSON}.thread_ids", "thread_ids")
try_work_and_idle = core.fill_in_cell(check_work_and_idle, f"{LESSON}.work_and_idle", "work_and_idle")
try_launch_config = core.fill_in_cell(check_launch_config, f"{LESSON}.launch_config", "launch_config")
