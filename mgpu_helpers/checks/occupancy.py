"""Checkers for notebook 02 and ex02. The arithmetic is held against the occupancy model
:func:`mgpu_helpers.models.occupancy.occupancy` (the CUDA occupancy calculator's algorithm), the typical mistakes
named; calling the model (or ``mh.lessons``) is refused. ``saxpy_cupy`` compiles a RawKernel: it needs a GPU."""

import itertools
import re
import threading

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.checks.cuda_model import PAD, fail_past_end
from mgpu_helpers.measure import gpu_limits
from mgpu_helpers.measure.timing import simulator
from mgpu_helpers.models import occupancy as occ

VEC_ADD_TWO = "mgpu_helpers.lessons.cupy_kernels.vec_add_two"  # notebook 02's own
SAXPY = "saxpy_cupy 要用 RawKernel 原地算出 y = alpha * x + y"


def _start(fn, what: str) -> None:
    """A stub is not done yet; handing the work to the model or to the course's own version is refused."""
    core.require_written(fn, what)
    from mgpu_helpers.lessons import cupy_kernels

    ours = {getattr(cupy_kernels, "blocks_per_sm", None), occ.occupancy, occ.one_wave_blocks}
    ours |= {reference_blocks_per_sm, reference_max_regs}
    advice = "这里要你自己写出算术：按线程、Block 数、寄存器各算一次，取最小。"
    core.refuse_course_code(fn, what, ours, packages=("mgpu_helpers",), advice=advice)


# The two kinds of SM the arithmetic is checked on, under the names the messages give them.
SMS = {
    "H200 (计算能力 9.0)": occ.HOPPER,
    "计算能力 8.6（每 SM 1536 线程、16 个 Block）": occ.SmLimits(
        max_threads_per_sm=1536, max_blocks_per_sm=16, sm_count=84
    ),
}


def _first_wrong(fn, what: str, pairs, reference, variants):
    """``fn(a, b, limits)`` on each pair on both kinds of SM, under one deadline (a whole float counts as an int):
    the first case it differs from ``reference`` on, as ``(a, b, name, limits, got, want, named mistake)``, or None."""
    cases = [(a, b, name, lim) for name, lim in SMS.items() for a, b in pairs]
    with core.deadline(5, what):
        answers = [core.call(fn, what, a, b, lim) for a, b, _, lim in cases]
    for (a, b, name, lim), got in zip(cases, answers):
        got = int(got) if isinstance(got, (float, np.floating)) and float(got).is_integer() else got
        if got != (want := reference(a, b, lim)) or isinstance(got, bool):
            return a, b, name, lim, got, want, next((m for m, v in variants(a, b, lim).items() if v == got), "")
    return None


def reference_blocks_per_sm(block: int, regs_per_thread: int, limits) -> int:
    """02's fill-in 1, the checker's answer: resident blocks per SM without shared memory (the model's)."""
    return occ.occupancy(block, regs_per_thread, limits=limits).blocks_per_sm


def _blocks_variants(block, regs, lim) -> dict[str, int]:
    """What the typical wrong versions of the arithmetic give, named by their mistake."""
    warps = -(-block // lim.warp_size)
    unit, parts = lim.reg_alloc_unit, lim.sub_partitions
    per_warp = -(-regs * lim.warp_size // unit) * unit
    by_threads, cap = lim.max_warps_per_sm // warps, lim.max_blocks_per_sm
    by_regs = (lim.regs_per_sm // parts // per_warp) * parts // warps
    # the two wrong register counts, each under the threads' and the blocks' limits as the right one is
    unrounded = min(by_threads, cap, (lim.regs_per_sm // parts // (regs * lim.warp_size)) * parts // warps)
    unsplit = min(by_threads, cap, lim.regs_per_sm // per_warp // warps)
    launch_anyway = f"超过 {lim.max_threads_per_block} 个线程的 Block 根本不能启动，应当返回 0"
    variants = {
        "寄存器没有按每 Warp 256 个一档向上取整（每线程寄存器数 × 32 要先取整到 256 的倍数）": unrounded,
        "寄存器没有按 4 个分区算（每个 Warp 的寄存器必须落在一个分区里：先算一个分区放几个整 Warp，再乘 4）": unsplit,
        "忘了每 SM 最多驻留的 Block 数（max_blocks_per_sm）": min(by_threads, by_regs),
        "Block 没有按整 Warp 算（100 个线程也占 4 个 Warp）": min(lim.max_threads_per_sm // block, cap, by_regs),
        launch_anyway: min(by_threads, cap, by_regs),
        "只看了线程数（寄存器也可能先用完）": min(by_threads, cap),
    }
    # A block too big to launch gives 0 in every version but the one that forgot exactly that.
    big = block > lim.max_threads_per_block
    return {m: 0 if big and m != launch_anyway else v for m, v in variants.items()}


def check_blocks_per_sm(fn) -> None:
    """``fn(block, regs_per_thread, limits) -> int``: resident blocks per SM (no shared memory), for two kinds of SM."""
    what = "blocks_per_sm 要算出每个 SM 同时驻留几个 Block"
    _start(fn, what)
    rng = core.new_rng()
    # Edge cases in every run: block 32 (the blocks limit), odd blocks (whole warps), 33 and 40 registers (the
    # 256-register unit), 167 (one block of 256 only), 64/65 x 1024 (fits exactly / cannot launch), 1025 threads.
    pairs = [(256, 32), (128, 33), (64, 40), (32, 16), (1024, 64), (1024, 65), (256, 167), (512, 167), (100, 16)]
    pairs += [(1025, 16), (96, 72), (160, 48)]
    pairs += [(int(rng.integers(1, 1025)), int(rng.integers(1, 256))) for _ in range(40)]
    pairs += [(32 * int(rng.integers(1, 33)), int(rng.integers(1, 256))) for _ in range(40)]
    if wrong := _first_wrong(fn, what, pairs, reference_blocks_per_sm, _blocks_variants):
        block, regs, name, lim, got, want, mistake = wrong
        if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
            raise core.CheckFailed(
                f"{name}，block = {block}，每线程 {regs} 个寄存器：应当返回一个整数（Block 个数），"
                f"你的函数返回 {got!r}。整除用 //。"
            )
        warps = -(-block // lim.warp_size)
        per_warp = -(-regs * lim.warp_size // lim.reg_alloc_unit) * lim.reg_alloc_unit
        raise core.CheckFailed(
            f"{name}，block = {block}，每线程 {regs} 个寄存器：应当是 {want} 个 Block/SM，你的函数返回 {got!r}。"
            + (f"看起来是{mistake}。" if mistake else "")
            + f"（这个 Block 占 {warps} 个 Warp；每个 Warp 的寄存器取整后是 {per_warp} 个。）"
        )
    core.passed(f"blocks_per_sm 在 {len(pairs) * len(SMS)} 组（block、寄存器、SM 上限）上与占用率模型一致。")


class _Traced:
    """02's fill-in 2 in the simulator: a 1-D array that records each write as (blockIdx.x, threadIdx.x, k-th access
    of that thread, index), refuses indices outside the buffer and stops a thread making far too many accesses."""

    def __init__(self, values: np.ndarray, budget: int):
        self.values, self.writes, self._count, self._budget = values, [], {}, budget
        self.shape, self.size, self.ndim, self.dtype = values.shape, values.size, 1, values.dtype

    def __len__(self):
        return self.size

    def _who(self, idx):
        t = threading.current_thread()
        key = (int(t.blockIdx.x), int(t.threadIdx.x))
        k = self._count.get(key, 0)
        if k > self._budget:
            raise RuntimeError(f"ENDLESS thread {key[1]} of block {key[0]} made more than {self._budget} accesses")
        self._count[key] = k + 1
        if not isinstance(idx, (int, np.integer)) or not 0 <= int(idx) < self.size:
            raise IndexError(f"OUTSIDE index {idx!r} outside 0..{self.size - 1}")
        return key + (k, int(idx))

    def __getitem__(self, idx):
        self._who(idx)
        return self.values[idx]

    def __setitem__(self, idx, value):
        self.writes.append(self._who(idx))
        self.values[idx] = value


def _run_two(kernel, what, n, block, grid):
    """Run ``kernel`` on n elements (+PAD sentinels); returns (c, writes or None, a + b, where)."""
    from numba import cuda

    rng = core.new_rng()
    a, b = core.int_values(rng, n + PAD), core.int_values(rng, n + PAD)
    c = np.full(n + PAD, np.nan, dtype=np.float32)
    where = f"n = {n}，启动 [{grid}, {block}]"
    try:
        if simulator():
            ta, tb, tc = _Traced(a, 8), _Traced(b, 8), _Traced(c, 8)
            kernel[grid, block](ta, tb, tc, np.int32(n))
            writes = tc.writes
        else:
            d_c = cuda.to_device(c)
            kernel[grid, block](cuda.to_device(a), cuda.to_device(b), d_c, np.int32(n))
            cuda.synchronize()
            c, writes = d_c.copy_to_host(), None
    except NotImplementedError:
        raise core.not_done(kernel, what) from None
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "ENDLESS" in text:
            raise core.CheckFailed(
                f"{where}：有线程访问数组的次数远超它该做的 2 个元素（{text.split('ENDLESS ')[1]}），"
                "多半是循环没有结束（下标忘了增加）。这个 Kernel 不需要循环。"
            ) from None
        if "OUTSIDE" in text:
            raise core.CheckFailed(
                f"{where}：访问了缓冲区之外的下标（{text.split('OUTSIDE ')[1]}）。每个元素都要先检查下标 < n 再读写。"
            ) from None
        raise core.CheckFailed(f"{where}：Kernel 运行出错（{type(exc).__name__}：{text}）。") from None
    return c, writes, a + b, where


def check_vec_add_two(kernel) -> None:
    """``kernel(a, b, c, n)``: each thread adds elements ``i`` and ``i + blockDim`` of its block's tile of
    ``2 * blockDim`` (``i`` = tile start + threadIdx). In the simulator the writes are counted too (each element
    once, each warp's k-th write on consecutive elements: coalesced), which a result alone cannot show."""
    what = "vec_add_two 要让每个线程加它所在分片里的两个元素"
    core.require_written(kernel, what)
    if kernel is core.course_object(VEC_ADD_TWO):
        raise core.CheckFailed(f"{what}：这是课程自己的 vec_add_two；在上面那格里写你自己的 Kernel。")
    rng, block = core.new_rng(), 32
    sizes = [1, block - 3, block + 5, 2 * block, 3 * block + 1, int(rng.integers(2 * block + 1, 9 * block))]
    cases = [(n, block) for n in sizes] + [(int(rng.integers(65, 300)), 64)]
    for n, bs in cases:
        grid = max(1, -(-n // (2 * bs)))  # ceil(n / (2 * block)) blocks, at least one
        c, writes, want, where = _run_two(kernel, what, n, bs, grid)
        fail_past_end(c, n, np.nan, where, "两个元素都要各自检查下标 < n。")
        if writes is not None:
            counts = np.bincount(np.asarray([w[3] for w in writes], dtype=np.int64), minlength=n + PAD)[:n]
            twice = np.flatnonzero(counts > 1)
            if twice.size:
                k = int(twice[0])
                who = sorted({(w[0], w[1]) for w in writes if w[3] == k})
                if max(w[3] for w in writes) < 2 * bs:  # every block wrote the first tile only
                    hint = "几个 Block 的同号线程写了同一个元素：下标里要有 blockIdx.x，每个 Block 负责自己的分片。"
                else:
                    hint = (
                        f"每个 Block 的分片有 2 × blockDim = {2 * bs} 个元素：分片的起点是 "
                        "blockIdx.x × 2 × blockDim.x，不是 blockIdx.x × blockDim.x。"
                    )
                raise core.CheckFailed(f"{where}：元素 {k} 被写了 {counts[k]} 次（(Block, 线程) = {who[:3]}）。{hint}")
        missing = np.flatnonzero(np.isnan(c[:n]))
        if missing.size:
            k = int(missing[0])
            second = k % (2 * bs) >= bs  # in the second half of its tile
            hint = f"每个线程的第二个元素是 i + blockDim.x（这里是 i + {bs}），它没被写。" if second else ""
            raise core.CheckFailed(f"{where}：元素 {k} 没有被写（共 {missing.size} 个）。{hint}".rstrip())
        core.compare(c[:n], want[:n], where)
        if writes is not None:
            _check_layout(writes, where, n, bs)
    layout = (
        "，每个元素恰好写一次，同一个 Warp 的每次写都是连续的元素（合并访问）"
        if simulator()
        else "（在 GPU 上只能看结果；每个元素写几次、访问是否连续，在模拟器里才数得出来）"
    )
    core.passed(f"vec_add_two 在 n = {', '.join(str(n) for n, _ in cases)} 上与 NumPy 一致{layout}。")


def _check_layout(writes, where: str, n: int, block: int) -> None:
    """Thread t of block k writes exactly elements i and i + block of its tile (i = 2 * block * k + t) below n:
    then every access of a warp is 32 consecutive floats (coalesced)."""
    done: dict = {}
    for blk, thread, _, idx in writes:
        done.setdefault((blk, thread), set()).add(idx)
    for (blk, thread), got in sorted(done.items()):
        base = 2 * block * blk
        want = {j for j in (base + thread, base + thread + block) if j < n}
        if got != want:
            hint = "每个线程要写它分片里的第 t 个和第 t + blockDim.x 个元素（超出 n 的不写）。"
            if got <= {base + 2 * thread, base + 2 * thread + 1}:
                hint = (
                    "这是「线程 t 取 2t 和 2t + 1」的布局：结果虽然对，但同一个 Warp 的每次读写都隔一个元素，"
                    "显存要多搬一倍的数据（没有合并访问）。让线程 t 取分片里的 t 和 t + blockDim.x。"
                )
            raise core.CheckFailed(
                f"{where}：Block {blk} 的线程 {thread} 写了元素 {sorted(got)}，应当是 {sorted(want)}。{hint}"
            )


def check_saxpy_structure(fn) -> None:
    """ex02-1 without a GPU: a RawKernel from a CUDA C source with ``extern "C"`` and a bounds check, no new array."""
    names = core.code_names(fn)
    # the first string constant holding a CUDA kernel, in core._code_objects' order (the last defined first);
    # "" when there is none, and then the source's own rules are not checked
    consts = (k for c in core._code_objects(getattr(fn, "__code__", None)) for k in c.co_consts)
    src = next((k for k in consts if isinstance(k, str) and "__global__" in k), "")
    bare = re.sub(r"#include\s*<[^>]*>|<<|>>|->", " ", src)
    fresh = sorted(names & {"empty_like", "zeros_like", "empty", "zeros", "ones_like", "copy", "full_like"})
    core.fail_first(
        (
            "RawKernel" not in names and "RawModule" not in names,
            f"{SAXPY}：函数里没有用到 cp.RawKernel。"
            "这个练习要你自己写 CUDA C 的 Kernel，不是用 CuPy 的数组运算（y += alpha * x）。",
        ),
        (
            src and 'extern "C"' not in src,
            f'{SAXPY}：CUDA 源码里没有 extern "C"：C++ 编译器会改写函数名，RawKernel 按名字就找不到这个 Kernel。',
        ),
        # a bounds check needs a comparison, whatever its form
        (
            src and "<" not in bare and ">" not in bare,
            f"{SAXPY}：CUDA 源码里没有边界检查：最后一个 Block 多出来的线程会写到 y 的末尾之外。",
        ),
        (
            fresh,
            f"{SAXPY}：函数里新建了数组（{', '.join(fresh)}）。练习要求原地更新 y："
            "Kernel 直接读写 y，最后 return y，不要把结果写进一块新的显存。",
        ),
    )


def check_saxpy_cupy(fn) -> None:
    """``fn(alpha, x, y)``: ``y <- alpha * x + y`` in place with a CuPy ``RawKernel``, returning y (GPU only)."""
    core.require_written(fn, SAXPY)
    check_saxpy_structure(fn)
    try:  # CuPy imports without a GPU, but every allocation then fails
        import cupy as cp

        usable = cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, or no driver / device (CUDARuntimeError)
        usable = False
    if not usable:  # said plainly: a check that could not run here is not a pass
        print(
            "跳过：这个检查需要 GPU：CuPy 要用 CUDA 驱动编译并启动你的 Kernel，这台机器上没有 GPU。"
            '只看了代码的结构（用了 RawKernel、extern "C"、边界检查、没有新建数组）；'
            "你的 saxpy_cupy 还没有被运行过，结果也就还没有被检查。在有 GPU 的机器上重新运行这一格。"
        )
        return
    rng = core.new_rng()
    # 1 element, one under a block, a multiple of the block, and random sizes that are not.
    sizes = [1, 255, 256 * int(rng.integers(2, 9)), int(rng.integers(2, 255)), int(rng.integers(257, 5000))]
    for n in sizes:
        alpha = float(rng.choice([0.5, -1.25, 2.0, 3.5]))  # exact in float32: sums stay exact
        # x and y are views of longer buffers: a thread past n reads ones after x, so the sentinel it writes after
        # y changes (read past an allocation of exactly n, x[n] is often 0, and a*0 + y[n] leaves y[n] as it was).
        x = np.concatenate([core.int_values(rng, n), np.ones(PAD, dtype=np.float32)])
        x[0] = 0.0  # a zero in the data
        y0 = core.int_values(rng, n + PAD)
        d_x, d_buf = cp.asarray(x)[:n], cp.asarray(y0)
        d_y = d_buf[:n]
        where = f"n = {n}，alpha = {alpha}"
        try:
            got = core.call(fn, SAXPY, alpha, d_x, d_y, seconds=30)  # the first launch compiles the kernel (NVRTC)
            cp.cuda.Device().synchronize()
        except core.CheckFailed:
            raise
        except Exception as exc:
            raise core.CheckFailed(f"{where}：运行出错（{type(exc).__name__}：{str(exc).splitlines()[0]}）。") from None
        buf = cp.asnumpy(d_buf)
        fail_past_end(buf, n, y0[n:], where, "Kernel 里要有边界检查 if (i < n)。")
        want = alpha * x[:n] + y0[:n]
        if got is None:
            raise core.CheckFailed(f"{where}：返回了 None。最后要 return y。")
        if not (isinstance(got, cp.ndarray) and got.data.ptr == d_y.data.ptr and got.size == n):
            hint = "（y 本身没有变）" if np.array_equal(buf[:n], y0[:n]) else ""
            raise core.CheckFailed(
                f"{where}：返回的不是传进来的 y{hint}。练习要求原地更新：Kernel 把结果写进 y，"
                "然后 return y，不要新建数组。"
            )
        hint = (
            "所有元素都不对：参数要按 C 的类型传，float alpha 传 np.float32(alpha)、int n 传 np.int32(n)；"
            "Python 的 float 会按 8 字节的 double 传过去。"
        )
        core.compare(buf[:n], want, where, hint if np.mean(np.isclose(buf[:n], want)) < 0.5 else "")
    core.passed(f"saxpy_cupy 在 n = {', '.join(str(n) for n in sizes)} 上原地算对了 y，n 之后的元素没有被碰。")


def reference_max_regs(block: int, min_blocks: int, limits) -> int:
    """ex02-2: the most registers per thread that still let ``min_blocks`` blocks reside on one SM (0: none do)."""
    fitting = itertools.takewhile(
        lambda regs: occ.occupancy(block, regs, limits=limits).blocks_per_sm >= min_blocks,
        range(1, limits.max_regs_per_thread + 1),
    )  # more registers never fit more blocks
    return max(fitting, default=0)


def _max_regs_variants(block, k, lim) -> dict[str, int]:
    """What the typical wrong versions of the inverse arithmetic give, named by their mistake."""
    warps = -(-block // lim.warp_size)
    per_part = -(-(warps * k) // lim.sub_partitions)
    unit, cap = lim.reg_alloc_unit, lim.max_regs_per_thread
    fits = warps * k <= lim.max_warps_per_sm and k <= lim.max_blocks_per_sm and block <= lim.max_threads_per_block
    right_uncapped = (lim.regs_per_sm // lim.sub_partitions // per_part) // unit * unit // lim.warp_size
    unchecked = "没有检查线程数、Block 数的上限（放不下时应当返回 0）"
    unrounded, unsplit = lim.regs_per_sm // (block * k), lim.regs_per_sm // (warps * k) // unit * unit // lim.warp_size
    variants = {
        "没有按每 Warp 256 个一档取整（直接 寄存器总数 /（线程数 × Block 数））": min(cap, unrounded),
        "没有按 4 个分区算（每个分区要放下 ceil(Warp 数 / 4) 个整 Warp）": min(cap, unsplit),
        f"忘了每线程最多 {cap} 个寄存器": right_uncapped,
        unchecked: min(cap, right_uncapped),
    }
    # A count that cannot reside gives 0 in every version but the one that forgot exactly that.
    return {m: v if fits or m == unchecked else 0 for m, v in variants.items()}


def check_max_regs(fn) -> None:
    """``fn(block, min_blocks, limits) -> int``: :func:`reference_max_regs`, on edge cases and random draws."""
    what = "max_regs_per_thread 要算出每线程最多能用几个寄存器"
    _start(fn, what)
    rng = core.new_rng()
    fixed = [(1024, 1), (1024, 2), (256, 1), (256, 4), (128, 8), (100, 3), (32, 32), (32, 33), (512, 5), (96, 7)]
    drawn = [(int(rng.integers(1, 1025)), int(rng.integers(1, 9))) for _ in range(30)]
    drawn += [(32 * int(rng.integers(1, 33)), int(rng.integers(1, 17))) for _ in range(30)]
    if wrong := _first_wrong(fn, what, fixed + drawn, reference_max_regs, _max_regs_variants):
        block, k, name, lim, got, want, mistake = wrong
        hint = "用你在 02 节写的 blocks_per_sm 验算：它在你的答案上应当 >= 目标，多 1 个寄存器就 < 目标。"
        raise core.CheckFailed(
            f"{name}，{k} 个 {block} 线程的 Block：每线程最多 {want} 个寄存器，你的函数返回 {got!r}。"
            + (f"看起来是{mistake}。" if mistake else hint)
        )
    core.passed(f"max_regs_per_thread 在 {len(fixed + drawn) * len(SMS)} 组（block、Block 数、SM 上限）上都对。")


def one_wave_facts() -> dict:
    """ex02-3: SM count, per-SM limits and registers of 02's grid-stride kernel here, and where they come from."""
    regs = None
    if not simulator():
        from numba import cuda

        from mgpu_helpers.lessons import cupy_kernels

        d = cuda.device_array(4, dtype=np.float32)
        cupy_kernels.vec_add_grid_stride_launch(d, d, d)  # compiles it, so its registers are known
        cuda.synchronize()
        regs = gpu_limits.numba_regs_per_thread(cupy_kernels.vec_add_grid_stride)
        lim = gpu_limits.device_limits()
        source = "这台机器的 GPU：SM 数与上限从设备读出，寄存器数来自编译好的 vec_add_grid_stride"
    if regs is None:  # no GPU, or no register count read from it
        from mgpu_helpers.bench import ncu

        ncu_rows = {r["kernel"]: r for r in ncu.load("h200")["rows"]}  # data/ncu_h200.json
        regs = ncu_rows["Numba vec_add_fast (4 per thread), block 256"]["registers_per_thread"]
        lim = occ.HOPPER
        source = (
            f"没有 GPU：按 H200 的上限（{lim.sm_count} 个 SM）、每线程 {regs} 个寄存器计算"
            "（ncu_h200.json 里每线程处理 4 个元素的 vec_add_fast 分到的寄存器数，grid-stride 版本每轮也做 4 个）"
        )
    return {"sm_count": lim.sm_count, "regs_per_thread": regs, "limits": lim, "source": source}


def check_one_wave_blocks(fn) -> None:
    """``fn(sm_count, regs_per_thread, limits) -> int``: one wave, against the driver's (GPU) or the model's count."""
    what = "one_wave_blocks 要给出一波有几个 Block"
    _start(fn, what)
    facts = one_wave_facts()
    sm, lim = facts["sm_count"], facts["limits"]
    got = core.call(fn, what, sm, facts["regs_per_thread"], lim)
    per_sm = reference_blocks_per_sm(256, facts["regs_per_thread"], lim)
    if simulator():
        want, by = per_sm * sm, "占用率模型"
    else:
        from mgpu_helpers.lessons import cupy_kernels

        want, by = cupy_kernels.one_wave_grid(cupy_kernels.vec_add_grid_stride, 256), "驱动的占用率查询"
    if got != want:
        slips = {
            sm: f"{sm} 是 SM 的个数；每个 SM 同时驻留 {per_sm} 个 Block，还要乘上它。",
            per_sm: f"{per_sm} 是每个 SM 驻留的 Block 数；一波要让全部 {sm} 个 SM 都坐满。",
            sm * lim.max_blocks_per_sm: f"这是 SM 数 × 每 SM 最多 {lim.max_blocks_per_sm} 个 Block；"
            "256 线程的 Block 先碰到的是线程数（或寄存器）的上限。",
            sm * lim.max_threads_per_sm: "这是所有 SM 上同时驻留的线程数，不是 Block 数：还要除以每 Block 的线程数。",
            sm * (lim.max_threads_per_sm // 256)
            if sm * (lim.max_threads_per_sm // 256) != want
            else -1: "只按线程数算了；再看看寄存器和 Block 数的上限。",
        }
        hint = slips.get(got, "") if isinstance(got, (int, np.integer)) else ""
        raise core.CheckFailed(
            f"block = 256，{facts['source']}：一波应当是 {want} 个 Block（{by}），你的答案是 {got!r}。{hint}".rstrip()
        )
    core.passed(f"一波是 {want} 个 Block（{sm} 个 SM × 每 SM {want // sm} 个），与{by}一致。")


try_blocks_per_sm = core.fill_in_cell(
    check_blocks_per_sm, reference_blocks_per_sm, "blocks_per_sm：每个 SM 驻留几个 Block"
)
try_vec_add_two = core.fill_in_cell(check_vec_add_two, VEC_ADD_TWO, "vec_add_two：每线程两个元素")
