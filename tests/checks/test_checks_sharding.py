"""06's fill-ins and ex06's checkers: typical wrong answers are named, a correct answer written differently passes."""

import math

import pytest

import mgpu_helpers as mh

mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import CheckFailed, sharding  # noqa: E402
from mgpu_helpers.tools import exercises  # noqa: E402


@pytest.fixture(autouse=True)
def own_code_store(tmp_path, monkeypatch):
    """A passing contiguous_ranges is kept (keep=): into a temporary folder, not the course's build/mine."""
    monkeypatch.setenv("MGPU_OWN_CODE_DIR", str(tmp_path / "mine"))


# -- contiguous_ranges (06) --------------------------------------------------------------------------------------


def ranges_by_slices(n_items, world_size):
    """Correct, written differently: every rank computes its own start from the formula."""

    def start(r):
        return r * (n_items // world_size) + min(r, n_items % world_size)

    return [range(start(r), start(r + 1)) for r in range(world_size)]


def test_ranges_written_differently_pass(capsys):
    sharding.check_contiguous_ranges(ranges_by_slices)
    assert capsys.readouterr().out.startswith("通过：")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda n, w: [range(r * -(-n // w), min(n, (r + 1) * -(-n // w))) for r in range(w)], "相差不止 1|没有分给"),
        (lambda n, w: [range(r * (n // w), n if r == w - 1 else (r + 1) * (n // w)) for r in range(w)], "相差不止 1"),
        (
            lambda n, w: [
                range(r * (n // w) + max(0, r - (w - n % w)), (r + 1) * (n // w) + max(0, r + 1 - (w - n % w)))
                for r in range(w)
            ],
            "前 n_items % world_size 个 Rank",
        ),
        (lambda n, w: [range(r * (n // w), (r + 1) * (n // w) + 1) for r in range(w)], "分给了两个 Rank|超出"),
        (lambda n, w: [(r * n // w, (r + 1) * n // w) for r in range(w)], "range"),
    ],
    ids=[
        "ceil sized chunks",
        "remainder dumped on the last rank",
        "remainder to the last ranks",
        "stop taken as inclusive",
        "tuples instead of ranges",
    ],
)
def test_wrong_ranges_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        sharding.check_contiguous_ranges(wrong)


def test_calling_the_course_split_is_not_writing_it():
    def lazy(n_items, world_size):
        return mh.lessons.sharding_rules.contiguous_ranges(n_items, world_size)

    with pytest.raises(CheckFailed, match="课程自己的实现"):
        sharding.check_contiguous_ranges(lazy)
    with pytest.raises(CheckFailed, match="课程自己的实现"):
        sharding.check_contiguous_ranges(mh.lessons.sharding_rules.contiguous_ranges)


def test_the_stub_falls_back_to_the_course_version(capsys):
    src, _ = exercises.stub_source(
        "def contiguous_ranges(n_items, world_size):\n    ### BEGIN SOLUTION\n    return []\n    ### END SOLUTION"
    )
    ns = {}
    exec(src, ns)
    got = sharding.try_contiguous_ranges(ns["contiguous_ranges"])
    assert got is mh.lessons.sharding_rules.contiguous_ranges
    assert "还没写" in capsys.readouterr().out
    assert sharding.try_contiguous_ranges(ranges_by_slices) is ranges_by_slices


# -- per_rank_memory (06) --------------------------------------------------------------------------------------

SPLIT = {
    "replicate": set(),
    "data_parallel": {"activations"},
    "zero1": {"optimizer", "activations"},
    "zero2": {"optimizer", "grads", "activations"},
    "zero3": {"params", "grads", "optimizer", "activations"},
}


def memory_written_differently(strategy, sizes, weights):
    """Correct: replicated parts first, then the shares, rank by rank."""
    out = []
    for w in weights:
        mine = {}
        for part in sizes:
            mine[part] = sizes[part] if part not in SPLIT[strategy] else sizes[part] * (w / sum(weights))
        out.append(mine)
    return out


def test_memory_written_differently_passes(capsys):
    sharding.check_per_rank_memory(memory_written_differently)
    assert "通过" in capsys.readouterr().out


def _with(change):
    def fn(strategy, sizes, weights):
        return change(strategy, sizes, weights)

    return fn


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda s, sizes, w: [{p: v / len(w) for p, v in sizes.items()} for _ in w], "不能除以 Rank 数"),
        (
            lambda s, sizes, w: [{p: v / len(w) if p in SPLIT[s] else v for p, v in sizes.items()} for _ in w],
            "权重不相等",
        ),
        (
            lambda s, sizes, w: memory_written_differently("replicate" if s == "data_parallel" else s, sizes, w),
            "data_parallel 会切分激活",
        ),
        (
            lambda s, sizes, w: memory_written_differently("zero3" if s == "zero2" else s, sizes, w),
            "zero2 只切|zero2 切",
        ),
        (lambda s, sizes, w: memory_written_differently(s, sizes, w)[0], "应当返回 .* 个字典"),
    ],
    ids=[
        "replicated parts divided too",
        "weights ignored",
        "data parallel splits nothing",
        "ZeRO-2 shards the parameters",
        "one rank instead of a list",
    ],
)
def test_wrong_memory_is_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        sharding.check_per_rank_memory(_with(wrong))


def test_calling_memory_plan_is_not_writing_it():
    def lazy(strategy, sizes, weights):
        plan = mh.models.memory.memory_plan(strategy, len(weights), 1e9, weights=weights, **sizes)
        return [{p: getattr(r, p) for p in sizes} for r in plan.ranks]

    with pytest.raises(CheckFailed, match="memory_plan"):
        sharding.check_per_rank_memory(lazy)


def test_the_seed_cases_are_in_every_run():
    cases = list(sharding._memory_cases(__import__("random").Random(0)))
    assert ("replicate", dict(params=24, grads=0, optimizer=0, activations=0), (1, 1, 1, 1)) in cases
    assert any(w == (14, 10) for _, _, w in cases) and any(w == (12, 12) for _, _, w in cases)


# -- shard_contiguous_by_cost (ex06) -------------------------------------------------------------------------------


def contiguous_by_filling(costs, world_size):
    """Correct, written differently: fill each rank until it reaches the average, the last takes the rest."""
    target = sum(costs) / world_size
    out, start = [], 0
    for r in range(world_size):
        stop, load = start, 0
        while stop < len(costs) and (r == world_size - 1 or load < target):
            load += costs[stop]
            stop += 1
        out.append(range(start, stop))
        start = stop
    return out


def test_contiguous_by_filling_passes(capsys):
    sharding.check_shard_contiguous_by_cost(contiguous_by_filling)
    assert "通过" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda costs, w: mh.lessons.sharding_rules.contiguous_ranges(len(costs), w), "超过了 平均 \\+ 最大单项"),
        # the course's LPT assignment: refused as the course's own code (through the module path) before its
        # order is even looked at
        (
            lambda costs, w: mh.lessons.sharding_rules.assign_by_cost(costs, w),
            "课程自己的 mh.lessons.sharding_rules.assign_by_cost",
        ),
        (
            lambda costs, w: [range(r.start, max(r.start, r.stop - 1)) for r in contiguous_by_filling(costs, w)],
            "首尾相接",
        ),
        (lambda costs, w: contiguous_by_filling(costs, w)[:-1] if w > 1 else [], "应当返回"),
    ],
    ids=["split by count", "LPT, order lost", "last item of each range dropped", "one range too few"],
)
def test_wrong_contiguous_splits_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        sharding.check_shard_contiguous_by_cost(wrong)


# -- fewest_gpus (ex06) -----------------------------------------------------------------------------------------


def fewest_by_search(strategy, capacity, params, grads, optimizer, activations):
    """Correct, written differently: try n = 1, 2, ... with 06's arithmetic, up to where it cannot change."""
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    whole = sum(v for p, v in sizes.items() if p not in SPLIT[strategy])
    shared = sum(v for p, v in sizes.items() if p in SPLIT[strategy])
    if whole > capacity or (shared and whole == capacity):
        return None
    n = 1
    while whole + shared / n > capacity:
        n += 1
    return n


def fewest_strict(strategy, capacity, params, grads, optimizer, activations):
    """Wrong: a rank that fills its GPU exactly is taken as not fitting (< where <= is meant)."""
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    whole = sum(v for p, v in sizes.items() if p not in SPLIT[strategy])
    shared = sum(v for p, v in sizes.items() if p in SPLIT[strategy])
    if whole > capacity or (shared and whole == capacity):
        return None
    n = 1
    while whole + shared / n >= capacity and n < 10_000:
        n += 1
    return n


def test_fewest_by_search_passes(capsys):
    sharding.check_rank_memory_fewest_gpus(fewest_by_search)
    assert "通过" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda s, cap, p, g, o, a: max(1, math.ceil((p + g + o + a) / cap)), "应当返回 None|复制的部分"),
        (fewest_strict, "刚好等于单卡容量"),
        (lambda s, cap, p, g, o, a: fewest_by_search(s, cap, p, g, o, a) or 0, "应当返回 None"),
        (lambda s, cap, p, g, o, a: fewest_by_search("zero3", cap, p, g, o, a), "应当"),
    ],
    ids=[
        "total over capacity for every strategy",
        "strict < instead of <=",
        "0 instead of None",
        "every strategy treated as ZeRO-3",
    ],
)
def test_wrong_fewest_gpus_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        sharding.check_rank_memory_fewest_gpus(wrong)


def test_an_answer_that_never_returns_is_reported_within_seconds():
    def forever(strategy, capacity, params, grads, optimizer, activations):
        n = 1
        while (params + grads) + (optimizer + activations) / n > capacity:  # never stops when it cannot fit
            n += 1
        return n

    import time

    t0 = time.perf_counter()
    with pytest.raises(CheckFailed, match="过了 2 秒还没有返回，停在第 \\d+ 行"):
        sharding.check_rank_memory_fewest_gpus(forever)
    assert time.perf_counter() - t0 < 10
    sharding.check_rank_memory_fewest_gpus(fewest_by_search)  # the session is still usable


def test_a_passing_contiguous_ranges_is_kept_for_ex06(capsys):
    """06 keeps the learner's split (keep=); ex06's comparison loads it with mh.mine."""
    assert sharding.try_contiguous_ranges(ranges_by_slices) is ranges_by_slices
    loaded = mh.mine("contiguous_ranges", fallback=None, lesson="06")
    assert loaded is not None and loaded(10, 4) == [range(3), range(3, 6), range(6, 8), range(8, 10)]
    assert "用的是你在 06 写的" in capsys.readouterr().out
