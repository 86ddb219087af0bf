"""Checkers of notebook 06 and ex06: split rules (who owns which items) and the memory each rank holds."""

import math
import random

from mgpu_helpers.checks import core
from mgpu_helpers.lessons import ring, sharding_rules
from mgpu_helpers.models import memory

PART_ZH = memory.PART_ZH
MEMORY_STRATEGIES = ("replicate", "data_parallel", "zero1", "zero2", "zero3")
SPLIT_ZH = {
    "replicate": "什么都不切",
    "data_parallel": "只切激活",
    "zero1": "切优化器状态和激活",
    "zero2": "切优化器状态、梯度和激活",
    "zero3": "四部分都切",
}
ARITHMETIC = "用加减乘除和循环自己算出来。"  # what a refusal of the course's code says to do instead


def check_contiguous_ranges(fn) -> None:
    """``fn(n_items, world_size) -> [range, ...]``, contiguous in rank order, the first ``n_items % ws`` one longer."""
    what = "contiguous_ranges 要把 0..n_items-1 切成 world_size 段连续区间"
    names = ("chunk_bounds", "contiguous_ranges", "tensor_split", "array_split")
    course = (sharding_rules.contiguous_ranges, ring.chunk_bounds)
    core.refuse_course_code(fn, what, course, names=names, advice=ARITHMETIC)
    rng = random.Random()
    cases = [(10, 4), (8, 4), (3, 4), (0, 3), (7, 1), (1, 2), (11, 3), (13, 5)]  # remainders, fewer items than ranks
    cases += [(rng.randint(0, 60), rng.randint(1, 9)) for _ in range(40)]
    for (n, ws), got in core.answers(fn, what, cases):
        where, want = f"n_items = {n}，world_size = {ws}", sharding_rules.contiguous_ranges(n, ws)  # the reference
        core.expect_items(got, ws, f"{where}：应当返回 {ws} 个 range（每个 Rank 一个，空的也算），实际得到 {got!r}。")
        if not all(isinstance(r, range) and r.step == 1 for r in got):
            raise core.CheckFailed(f"{where}：每一段要是步长为 1 的 range(start, stop)，实际得到 {list(got)!r}。")
        covered = sorted(i for r in got for i in r)
        if covered != list(range(n)):
            dup = sorted({i for i in covered if covered.count(i) > 1})
            miss = sorted(set(range(n)) - set(covered))
            wrong = "有下标超出了 0..n_items-1"
            if dup or miss:
                wrong = f"下标 {dup[0]} 分给了两个 Rank" if dup else f"下标 {miss[0]} 没有分给任何 Rank"
            raise core.CheckFailed(
                f"{where}：得到 {list(got)}，{wrong}；每个下标恰好属于一个 Rank（注意 range 的 stop 不包含在内）。"
            )
        sizes, gap = [len(r) for r in got], any(a.stop != b.start for a, b in zip(got, got[1:]))
        core.fail_first(
            (gap, f"{where}：得到 {list(got)}，各段没有按 rank 顺序首尾相接。"),
            (
                max(sizes) - min(sizes) > 1,
                f"{where}：各段长度 {sizes} 相差不止 1：余下的 {n % ws} 个要一个一个分给不同的 Rank，"
                "而不是全堆在一个 Rank 上（或者每段都取上取整）。",
            ),
            (
                list(got) != want,
                f"{where}：得到 {list(got)}，长度 {sizes}；约定是前 n_items % world_size 个 Rank "
                f"各多拿一个（和 05 节环的分块一样），应当是 {want}。",
            ),
        )
    core.passed(f"contiguous_ranges 在 {len(cases)} 组（含有余数、元素比 Rank 少、0 个元素）上都切对了。")


def reference_per_rank_memory(strategy, sizes, weights):
    """The checker's reference: one dict (part -> size) per rank, sharded parts split by ``weights``."""
    plan = memory.memory_plan(strategy, len(weights), math.inf, weights=list(weights), **sizes)
    return [{p: getattr(r, p) for p in memory.PARTS} for r in plan.ranks]


def _memory_cases(rng):
    """The seed's cases, then 06's job under every strategy (even and uneven weights), one rank, then random ones."""
    seed = dict(params=24, grads=0, optimizer=0, activations=0)
    yield from (("replicate", seed, (1, 1, 1, 1)), ("zero3", seed, (14, 10)), ("zero3", seed, (12, 12)))
    for sizes, weights in (
        (dict(params=6, grads=6, optimizer=12, activations=8), (1, 1, 1, 1)),
        (dict(params=3, grads=5, optimizer=11, activations=7), (3, 1, 0, 2)),
    ):
        yield from ((strategy, sizes, weights) for strategy in MEMORY_STRATEGIES)
    yield "data_parallel", dict(params=5, grads=5, optimizer=10, activations=9), (1,)
    for _ in range(40):
        ws = rng.randint(1, 8)
        weights = tuple([1] * ws) if rng.random() < 0.5 else tuple(rng.randint(0, 5) or 1 for _ in range(ws))
        yield (rng.choice(MEMORY_STRATEGIES), {p: rng.randint(0, 40) for p in PART_ZH}, weights)


def check_per_rank_memory(fn) -> None:
    """``fn(strategy, sizes, weights) -> [{part: GB}, one per rank]``: split parts by ``weights``, the rest whole."""
    what = "per_rank_memory 要按策略算出每个 Rank 的参数、梯度、优化器状态和激活"
    names = ("memory_plan", "compare_strategies", "reference_per_rank_memory")
    core.refuse_course_code(fn, what, (memory.memory_plan, reference_per_rank_memory), names=names, advice=ARITHMETIC)
    cases = list(_memory_cases(random.Random()))
    for strategy, sizes, weights in cases:
        got = core.call(fn, what, strategy, dict(sizes), list(weights))
        want = reference_per_rank_memory(strategy, sizes, weights)
        where, n = f"{strategy}，各部分 {sizes} GB，权重 {list(weights)}", len(weights)
        core.expect_items(got, n, f"{where}：应当返回 {n} 个字典（每个 Rank 一个），实际得到 {got!r}。")
        for r, (g, w) in enumerate(zip(got, want)):
            if not isinstance(g, dict) or set(g) != set(w):
                raise core.CheckFailed(f"{where}：rank {r} 应当是一个字典，键为 {sorted(w)}，实际得到 {g!r}。")
            for part in memory.PARTS:
                value = g[part]
                if isinstance(value, (int, float)) and math.isclose(float(value), w[part], rel_tol=1e-9, abs_tol=1e-9):
                    continue
                split = part in memory.STRATEGIES[strategy]
                evenly = n > 1 and math.isclose(float(value) * n, sizes[part])  # split (or not) by the rank count
                whole, uneven = split and float(value) == sizes[part], split and len(set(weights)) > 1 and evenly
                why = core.first_hint(
                    (whole, f"{strategy} 会切分{PART_ZH[part]}，可你让每个 Rank 存了一整份。"),
                    (
                        not split and evenly,
                        f"{strategy} {SPLIT_ZH[strategy]}，{PART_ZH[part]}是每个 Rank 各存一整份的，不能除以 Rank 数。",
                    ),
                    (uneven, "权重不相等：切分的部分要按 权重 / 权重之和 分，而不是平均分。"),
                    default=f"{strategy} {SPLIT_ZH[strategy]}；切分的部分按 权重 / 权重之和 分，其余每个 Rank 一整份。",
                )
                raise core.CheckFailed(
                    f"{where}：rank {r} 的{PART_ZH[part]}应当是 {w[part]:g} GB，实际是 {value!r}。{why}"
                )
    core.passed(
        f"per_rank_memory 在 {len(cases)} 组（关卡的 24 GB 模型、14/10 与 12/12、权重不等、单个 Rank、随机大小）上都对。"
    )


def check_shard_contiguous_by_cost(fn) -> None:
    """``fn(costs, world_size) -> [range, ...]``: in order, reproducible, ``max load <= mean + max(costs)``."""
    what = "shard_contiguous_by_cost 要按累计成本把样本切成 world_size 段连续区间"
    core.refuse_course_code(fn, what, (sharding_rules.assign_by_cost,), advice=ARITHMETIC)
    # Skewed cases first: a split by count passes many random inputs, none of these. Zeros, fewer items than
    # ranks, a single rank and all-zero costs are in every run.
    cases = [([10] * 4 + [0] * 12, 4), ([0] * 9 + [30, 30, 30], 3), ([9, 8, 7, 1, 1, 1, 1, 2], 4), ([5, 0, 5], 5)]
    cases += [([0, 0, 0, 0], 3), ([7], 1), ([], 2), ([1] * 10, 4), ([50, 1, 1, 1, 1, 1, 1, 50], 2)]
    rng = random.Random()
    cost = lambda: rng.choice((0, rng.randint(0, 20), rng.randint(0, 200)))
    cases += [([cost() for _ in range(rng.randint(0, 30))], rng.randint(1, 7)) for _ in range(300)]
    for costs, ws in cases:
        where = f"costs = {costs}，world_size = {ws}"
        got, again = core.call(fn, what, list(costs), ws), core.call(fn, what, list(costs), ws)
        core.expect_items(got, ws, f"{where}：应当返回 {ws} 个 range（每个 Rank 一个，空的也算），实际得到 {got!r}。")
        if list(got) != list(again):
            raise core.CheckFailed(f"{where}：两次调用得到不同的结果 {list(got)} 和 {list(again)}；切分必须可重复。")
        if not all(isinstance(r, range) and r.step == 1 for r in got):
            raise core.CheckFailed(
                f"{where}：得到 {list(got)!r}；每个 Rank 要拿一段连续的 range(start, stop)，"
                "样本的先后顺序不能打乱（LPT 那样挑着分就不连续了）。"
            )
        if got[0].start != 0 or got[-1].stop != len(costs) or any(a.stop != b.start for a, b in zip(got, got[1:])):
            raise core.CheckFailed(
                f"{where}：得到 {list(got)}；各段要按 rank 顺序首尾相接，从 0 开始、到 "
                f"{len(costs)} 结束，每个下标恰好一次。"
            )
        loads = [sum(costs[i] for i in r) for r in got]
        bound = sum(costs) / ws + max(costs, default=0)
        worst = max(range(ws), key=lambda r: loads[r])
        if loads[worst] > bound + 1e-9:
            raise core.CheckFailed(
                f"{where}：rank {worst} 的总成本 {loads[worst]:g} 超过了 平均 + 最大单项 = {bound:g}"
                f"（各 Rank 的负载 {loads}）。按个数切不看成本；切点要由累计成本决定。"
            )
    core.passed(
        f"shard_contiguous_by_cost 在 {len(cases)} 组成本上（含偏斜、0 成本、样本比 Rank 少）：连续、保持顺序、"
        "每个下标恰好一次、最大负载 ≤ 平均 + 最大单项。"
    )


def reference_fewest_gpus(strategy, capacity, params, grads, optimizer, activations):
    """The fewest equal-share GPUs of ``capacity`` on which every rank fits, or None when no number does."""
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    split = sum(v for p, v in sizes.items() if p in memory.STRATEGIES[strategy])
    whole = sum(v for p, v in sizes.items() if p not in memory.STRATEGIES[strategy])
    if whole > capacity or (split > 0 and whole == capacity):
        return None
    if split == 0:
        return 1
    return math.ceil(split / (capacity - whole))  # exact: the checker's sizes and capacities are whole numbers


def check_rank_memory_fewest_gpus(fn) -> None:
    """``fn(strategy, capacity, *sizes)``: the fewest equal-share GPUs that hold the job, None if none does."""
    what = "fewest_gpus 要给出装得下所需的最少 GPU 数（永远装不下时返回 None）"
    names = ("memory_plan", "compare_strategies", "reference_fewest_gpus")
    core.refuse_course_code(fn, what, (reference_fewest_gpus,), names=names, advice=ARITHMETIC)
    rng = random.Random()
    cases = [
        ("replicate", 16, 24, 0, 0, 0),  # the seed: 24 GB replicated never fits in 16 GB
        ("zero3", 16, 24, 0, 0, 0),  # ... sharded, 2 GPUs
        *((s, 16, 6, 6, 12, 8) for s in ("data_parallel", "zero1", "zero2", "zero3")),  # 06's job: 24 GB of state
        ("zero2", 16, 8, 8, 0, 0),  # exactly full on 1 GPU: <= fits
        ("zero1", 12, 6, 6, 3, 3),  # replicated parts exactly the capacity, something split
        ("data_parallel", 10, 2, 2, 2, 0),  # nothing split and it fits: 1
        ("zero3", 5, 0, 0, 0, 0),  # an empty job
    ]
    size = lambda: rng.choice((0, rng.randint(1, 30), rng.randint(1, 300)))
    draw = lambda: (rng.choice(MEMORY_STRATEGIES), rng.choice((8, 16, 24, 40, 80)), *(size() for _ in range(4)))
    cases += [draw() for _ in range(60)]
    for case, got in core.answers(fn, what, cases):
        want = reference_fewest_gpus(*case)
        strategy, cap, p, g, o, a = case
        where = f"{strategy}，单卡 {cap} GB，参数 {p} 梯度 {g} 优化器 {o} 激活 {a} GB"
        if got == want and (got is None or core.is_rank_number(got)):
            continue
        one_more = want is not None and core.is_number(got) and got == want + 1
        core.fail_first(
            (
                want is None,
                f"{where}：无论加多少张卡都装不下（每个 Rank 各存一整份的部分已经 ≥ 单卡容量），"
                f"应当返回 None，实际得到 {got!r}。",
            ),
            (got is None, f"{where}：{want} 张卡就装得下，应当返回 {want}，实际得到 None。"),
            (one_more, f"{where}：应当是 {want}，实际 {got!r}；刚好等于单卡容量也算装得下（≤，不是 <）。"),
            (
                True,
                f"{where}：应当是 {want} 张，实际得到 {got!r}。复制的部分不随卡数变小："
                "先看它本身装不装得下，剩下的容量再去装切分的部分。",
            ),
        )
    core.passed(f"fewest_gpus 在 {len(cases)} 组（关卡的 24 GB 模型、刚好装满、永远装不下、随机大小）上都对。")


try_contiguous_ranges = core.fill_in_cell(
    check_contiguous_ranges,
    sharding_rules.contiguous_ranges,
    "按个数连续切分 contiguous_ranges",
    keep="contiguous_ranges",
    lesson="06",
)
try_per_rank_memory = core.fill_in_cell(
    check_per_rank_memory, reference_per_rank_memory, "每个 Rank 的显存 per_rank_memory"
)
