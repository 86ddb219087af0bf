"""Checkers of notebook 14 (FSDP2 at scale) and ex14: a rank's shard on a device mesh, held against DTensor's own
rule; the ZeRO stages' model-state bytes per rank, held against 06's memory model."""

import itertools
import math
import random

from mgpu_helpers.checks import core
from mgpu_helpers.models import memory

STAGES = ("dp", "zero1", "zero2", "zero3")
PLAN_NAME = {"dp": "data_parallel", "zero1": "zero1", "zero2": "zero2", "zero3": "zero3"}


def dtensor_slices(shape, mesh_shape, coords, shard_dims):
    """DTensor's own ``[(start, length), ...]`` of the shard at mesh ``coords``, mesh dim ``i`` placed as
    ``Shard(shard_dims[i])`` (``None``: ``Replicate()``); the same rule written here where torch lacks the helper."""
    try:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

        placements = [Replicate() if d is None else Shard(d) for d in shard_dims]
        lengths, starts = _compute_local_shape_and_global_offset(
            tuple(shape), tuple(mesh_shape), list(coords), placements
        )
    except (ImportError, TypeError):
        return _slips(shape, mesh_shape, coords, shard_dims)
    return [(int(s), int(n)) for s, n in zip(starts, lengths)]


def _split(length, size, coord, rule):
    """(offset, length) of piece ``coord`` of ``size`` from a span of ``length``, by a rule named for a slip."""
    if rule == "floor":  # n // N each, the last one takes the rest
        chunk = length // size
        return coord * chunk, (length - coord * chunk if coord == size - 1 else chunk)
    if rule == "array_split":  # the first n % N pieces one longer
        base, extra = divmod(length, size)
        return coord * base + min(coord, extra), base + (coord < extra)
    chunk = -(-length // size)
    if rule == "unclipped":  # ceil, but not cut at the end
        return coord * chunk, chunk
    lo = min(coord * chunk, length)
    return lo, min(lo + chunk, length) - lo


# The usual wrong ways to cut a shard, by name (``slip`` of _slips), and what each gets wrong; checked in this order.
SLICE_SLIPS = {
    "floor": "你用的段长是 n // N、最后一段收下余数；torch 的段长是向上取整 ceil(n / N)，"
    "前面的段都是满的，最后几段更短，甚至是空的。",
    "array_split": "你像 numpy.array_split 那样让前几段各多一个；torch 按 torch.chunk 切："
    "每段 ceil(n / N)，不够的是最后几段。",
    "unclipped": "最后几段越过了这一维的末尾：长度要截到该维结束为止，可能是 0。",
    "flat": "两个网格维切同一个张量维时，第二个网格维是在第一个切出的那一段里再切，不是重新切整条。",
    "swapped": "网格的第 i 维要配 coords[i] 和 shard_dims[i]：坐标的顺序用反了。",
}


def _slips(shape, mesh_shape, coords, shard_dims, slip="ceil"):
    """The shard by DTensor's rule (``"ceil"``) or by a slip of :data:`SLICE_SLIPS`: a rule of :func:`_split`;
    ``"flat"``: a second mesh dim on a tensor dim splits the whole dim, not the first one's piece; ``"swapped"``:
    the coords reversed."""
    spans, rule = [(0, n) for n in shape], slip if slip in ("floor", "array_split", "unclipped") else "ceil"
    for size, coord, dim in zip(mesh_shape, list(coords)[::-1] if slip == "swapped" else coords, shard_dims):
        if dim is not None:
            lo, n = _split(shape[dim] if slip == "flat" else spans[dim][1], size, coord, rule)
            spans[dim] = (spans[dim][0] + lo, n)
    return spans


def _same(got, want) -> bool:
    """Equal shards: the same lengths, and the same starts wherever a shard is not empty (DTensor puts an
    empty shard's start at the end of the dim; where nothing is held the start says nothing)."""
    return len(got) == len(want) and all(gn == wn and (wn == 0 or gs == ws) for (gs, gn), (ws, wn) in zip(got, want))


def check_local_slices(fn) -> None:
    """``fn(shape, mesh_shape, coords, shard_dims) -> [(start, length), ...]``, against DTensor's rule on every rank."""
    what = "local_slices 要给出网格上某个 Rank 持有的那一块"
    from torch.distributed.tensor import _utils as dtensor_utils

    helpers = ("compute_local_shape_and_global_offset", "_compute_local_shape_and_global_offset")
    course = (dtensor_slices, *(getattr(dtensor_utils, name, None) for name in helpers))
    core.refuse_course_code(fn, what, course, advice="用整数运算自己切出来。", names=(*helpers, "distribute_tensor"))
    rng = random.Random()
    fixed = [((5, 3), (4,), (0,)), ((7, 5), (2, 3), (0, 0)), ((7, 5), (2, 3), (0, 1)), ((6, 4), (2, 2), (None, 1))]
    fixed += [((3,), (4,), (0,)), ((9, 4), (4, 2), (1, 0)), ((12, 7), (2,), (0,)), ((10, 10), (3, 3), (0, 0))]
    for _ in range(16):
        mesh = (rng.randint(2, 8),) if rng.random() < 0.4 else (rng.randint(2, 4), rng.randint(2, 4))
        shape = tuple(rng.randint(1, 20) for _ in range(rng.randint(1, 3)))
        n = len(shape)  # the first mesh dim shards a tensor dim, a second one may replicate:
        dims = tuple(rng.choice([None, *range(n)]) if k else rng.randrange(n) for k in range(len(mesh)))
        fixed.append((shape, mesh, dims))
    calls = [(s, m, c, d) for s, m, d in fixed for c in itertools.product(*map(range, m))]
    for args, got in core.answers(fn, what, calls):
        shape, mesh, coords, dims = args
        where = f"shape={shape}，mesh_shape={mesh}，coords={coords}，shard_dims={dims}"
        want = dtensor_slices(*args)
        try:
            got = [(int(s), int(n)) for s, n in got]
        except (TypeError, ValueError):
            raise core.CheckFailed(f"{where}：应当返回每个张量维一个 (start, length)，实际得到 {got!r}。") from None
        if _same(got, want):
            continue
        hint = core.first_hint(
            (
                len(got) != len(shape),
                f"要给张量的每一维（共 {len(shape)} 维）各一个 (start, length)，没被切的维是 (0, 该维长度)。",
            ),
            *((_same(got, _slips(*args, slip)), text) for slip, text in SLICE_SLIPS.items()),
            default="对照 DTensor 自己的切法：沿网格维依次切，每段 ceil(n / N)。",
        )
        raise core.CheckFailed(f"{where}：DTensor 给这个 Rank 的是 {want}，你的答案是 {got}。{hint}")
    core.passed(f"{len(calls)} 个 Rank 的分片和 DTensor 自己的切法一致（1 维和 2 维网格，含不能整除的形状）")


def reference_model_state_bytes(strategy: str, psi: float, world_size: int, k: float = 12) -> float:
    """06's memory model with the ZeRO paper's mixed-precision sizes: 2 psi (fp16 parameters) + 2 psi (fp16
    gradients) + K psi (fp32 master copy, momentum, variance: K = 12 for Adam), sharded by ``strategy``."""
    sizes = dict(params=2 * psi, grads=2 * psi, optimizer=k * psi)
    return max(memory.memory_plan(PLAN_NAME[strategy], world_size, float("inf"), **sizes).totals)


def check_model_state_bytes(fn) -> None:
    """``fn(strategy, psi, world_size, k=12) -> bytes`` one rank holds under a ZeRO stage, against 06's model."""
    what = "model_state_bytes 要给出一个 Rank 存的模型状态（字节）"
    names = ("memory_plan", "compare_strategies")
    core.refuse_course_code(fn, what, (reference_model_state_bytes,), advice="用加减乘除自己算出来。", names=names)
    rng = random.Random()
    cases = [(stage, 7.5e9, 64, 12) for stage in STAGES]
    for _ in range(30):
        psi = rng.randint(1, 400) * 10 ** rng.randint(6, 9)
        cases.append((rng.choice(STAGES), psi, rng.choice([1, 2, 3, 8, 64, 1024]), rng.choice([12, 4, 16])))
    for (strategy, psi, n, k), got in core.answers(fn, what, cases):
        where = f"strategy={strategy!r}，psi={psi:g}，world_size={n}，k={k}"
        got = core.number_answer(got, f"{where}：应当返回一个数（字节），实际得到 {got!r}。")
        want = reference_model_state_bytes(strategy, psi, n, k)
        if abs(got - want) <= 1e-9 * want:
            continue
        only = lambda value, *stages: value if strategy in stages else None  # a slip of these strategies alone
        fp32 = (8 + k) * psi / (n if strategy == "zero3" else 1)  # parameters and gradients of 4 bytes
        slips = [  # the usual wrong formulas
            (only(4 * psi + k * psi / n, "zero2"), "ZeRO-2 把梯度也切开了：2Ψ 的梯度每个 Rank 只存 1/N。"),
            (only(2 * psi + (2 + k) * psi / n, "zero1"), "ZeRO-1 只切优化器状态：梯度（2Ψ）还是每个 Rank 一整份。"),
            (
                only(fp32, "dp", "zero3"),
                "混合精度下参数和梯度是 16 位（每个 2 字节），4 字节的 fp32 主副本已经算在 K 里。",
            ),
            (only((4 + k) * psi / n, "zero1", "zero2"), "ZeRO-1/2 不切参数：2Ψ 的 fp16 参数每个 Rank 一整份。"),
            (only((4 + k) * psi, "zero1", "zero2", "zero3"), "这个策略要切开的部分没有除以 N。"),
        ]
        default = "按 06 的内存模型：参数 2Ψ、梯度 2Ψ、优化器状态 KΨ，这个策略切开的部分除以 N，其余每个 Rank 一整份。"
        hint = core.matching_hint(got, slips, rel_tol=1e-9, default=default)
        raise core.CheckFailed(f"{where}：应当是 {want:,.0f} 字节，你的答案是 {got:,.0f}。{hint}")
    core.passed(f"{len(cases)} 组规模上四种策略的模型状态都和 06 的内存模型一致（ZeRO 论文的 (2+2+K)Ψ 记法）")


def reference_cheapest_stage(psi, world_size, capacity, k=12):
    return next((s for s in STAGES if reference_model_state_bytes(s, psi, world_size, k) <= capacity), None)


def check_cheapest_stage(fn) -> None:
    """``fn(psi, world_size, capacity, k=12) -> stage | None``: the first of :data:`STAGES` (each shards, and from
    ZeRO-3 on communicates, more) whose model states fit ``capacity`` bytes on every rank, exactly full included."""
    what = "cheapest_stage 要选出第一个放得下的 ZeRO 阶段"
    rng = random.Random()
    h200 = 141e9  # one H200's memory in bytes
    fixed = ((1e9, 8, 16e9), (1e9, 8, 15.9e9), (7.5e9, 64, h200), (70e9, 8, h200), (70e9, 1024, h200), (1e12, 8, h200))
    cases = [(psi, n, capacity, 12) for psi, n, capacity in fixed]
    for _ in range(40):
        psi, n, k = rng.randint(1, 200) * 1e9, rng.choice([2, 4, 8, 16, 64, 256, 1024]), rng.choice([12, 8, 16])
        exact = reference_model_state_bytes(rng.choice(STAGES), psi, n, k)
        cases.append((psi, n, rng.choice([exact, exact * rng.uniform(0.5, 2.0)]), k))
    for (psi, n, cap, k), got in core.answers(fn, what, cases):
        want = reference_cheapest_stage(psi, n, cap, k)
        if got == want:
            continue
        fits = [s for s in STAGES if reference_model_state_bytes(s, psi, n, k) <= cap]
        strictly = [s for s in STAGES if reference_model_state_bytes(s, psi, n, k) < cap]
        dropped_k = k != 12 and got == reference_cheapest_stage(psi, n, cap)
        greedy = want is not None and got == "zero3"
        hint = core.first_hint(
            (dropped_k, f"k 要传下去：这一组的优化器状态是每个参数 {k} 字节，不是 12。"),
            (got not in STAGES + (None,), f"要返回 {STAGES} 中的一个名字，或者 None；实际得到 {got!r}。"),
            (greedy, "不要总挑最省内存的：切得越多，通信越多（ZeRO-3 每步多一次 All-Gather）；要的是第一个放得下的。"),
            (want is None and got is not None, "一个阶段都放不下时返回 None（连 ZeRO-3 都超出容量）。"),
            (got == (strictly[0] if strictly else None), "正好等于容量也算放得下（<=，不是 <）。"),
            (fits and got == fits[-1], "按 dp、zero1、zero2、zero3 的顺序找第一个放得下的，不是最后一个。"),
            default="用 model_state_bytes 算出每个阶段的字节数，和容量比较。",
        )
        raise core.CheckFailed(
            f"psi={psi:g}，world_size={n}，capacity={cap:,.0f} 字节，k={k}：应当是 {want!r}，你的答案是 {got!r}。{hint}"
        )
    core.passed(f"{len(cases)} 种规模和容量（含正好放满的边界）都选对了阶段")


def reference_shard_bytes(shapes, world_size, rank, bytes_per_element=4):
    """Bytes of FSDP2's shards of parameters of ``shapes`` on ``rank``: each cut along dim 0 (DTensor's rule)."""
    rows = [dtensor_slices(shape[:1], (world_size,), (rank,), (0,))[0][1] for shape in shapes]
    return sum(r * math.prod(shape[1:]) for r, shape in zip(rows, shapes)) * bytes_per_element


def check_shard_bytes(fn) -> None:
    """``fn(shapes, world_size, rank, bytes_per_element=4) -> bytes`` that FSDP2 (dim 0, as torch.chunk) leaves."""
    what = "shard_bytes 要给出 FSDP2 留在一个 Rank 上的参数字节数"
    rng = random.Random()
    models = [[(12, 7), (12,), (5, 12), (5,), (3, 5), (3,)]]
    models += [
        [tuple(rng.randint(1, 40) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 6))]
        for _ in range(20)
    ]
    cases = [(m, n, r, rng.choice([4, 2])) for m in models for n in [rng.randint(2, 9)] for r in range(n)]
    for (shapes, n, rank, b), got in core.answers(fn, what, cases):
        where = f"shapes={shapes}，world_size={n}，rank={rank}，bytes_per_element={b}"
        got = core.number_answer(got, f"{where}：应当返回一个数（字节），实际得到 {got!r}。")
        want = reference_shard_bytes(shapes, n, rank, b)
        if got == want:
            continue
        # which slip it is: the one that gives the learner's answer on every rank of this model
        answer = lambda r: core.number_answer(
            core.call(fn, what, shapes, n, r, b), f"{where}：rank {r} 的答案不是一个数。"
        )
        mine = [got if r == rank else answer(r) for r in range(n)]

        def by_rule(rule, per_row=True, scale=b):
            return lambda r: (
                scale * sum(_split(s[0], n, r, rule)[1] * (math.prod(s[1:]) if per_row else 1) for s in shapes)
            )

        even = lambda r: b * sum(map(math.prod, shapes)) / n  # every parameter's bytes spread evenly
        slips = [
            (even, "FSDP2 不是把所有参数平均分：它逐个参数切第 0 维，不能整除时前面的 Rank 多拿一行。"),
            (by_rule("array_split"), "多出来的行不是前几段各多一行：每段 ceil(行数 / N)，不够的是最后几段。"),
            (by_rule("floor"), "段长是 ceil(行数 / N)，不是 行数 // N（最后一段收下余数的是另一种切法）。"),
            (by_rule("unclipped"), "最后几段要截到行数为止，可能是 0 行。"),
            (by_rule("ceil", scale=1), "要乘每个元素的字节数 bytes_per_element。"),
            (by_rule("ceil", per_row=False), "切的是第 0 维的行，每行还有其它维的元素：乘上一行的元素个数。"),
        ]
        hint = core.first_hint(
            *((all(abs(slip(r) - m) < 1e-9 for r, m in enumerate(mine)), text) for slip, text in slips),
            default="逐个参数：这个 Rank 分到第 0 维的几行，乘一行的元素个数，再乘每个元素的字节数。",
        )
        raise core.CheckFailed(f"{where}：FSDP2 在这个 Rank 上留下 {want:,} 字节，你的答案是 {got:,.0f}。{hint}")
    core.passed(f"{len(cases)} 个 Rank 上的参数分片字节数都和 FSDP2 的切法一致（含行数少于 Rank 数的参数）")


try_local_slices = core.fill_in_cell(
    check_local_slices, "mgpu_helpers.lessons.fsdp.local_slices", "local_slices：网格上一个 Rank 的分片"
)
try_model_state_bytes = core.fill_in_cell(
    check_model_state_bytes, "mgpu_helpers.lessons.fsdp.model_state_bytes", "model_state_bytes：每个 Rank 的模型状态"
)
