"""Checkers for ex06: sharding and memory per rank."""
from __future__ import annotations

import math
import random

import numpy as np

from mgpu_helpers.checks.core import CheckFailed, passed, call


def _shard_property(fn, costs, world_size) -> None:
    what = "shard_by_cost 要把每个下标恰好分给一个 Rank，并按成本均衡"
    where = f"costs = {costs}，world_size = {world_size}"
    owners: dict[int, int] = {}
    loads = []
    for rank in range(world_size):
        mine = call(fn, what, list(costs), rank, world_size)
        again = call(fn, what, list(costs), rank, world_size)
        if list(mine) != list(again):
            raise CheckFailed(f"{where}：rank {rank} 两次调用得到不同的结果 {list(mine)} 和 {list(again)}；"
                              "分片必须可重复（不要用随机数或进程私有的状态）。")
        for i in mine:
            if not (isinstance(i, (int, np.integer)) and 0 <= i < len(costs)):
                raise CheckFailed(f"{where}：rank {rank} 拿到了 {i!r}，它不是 0..{len(costs) - 1} 之间的下标。")
            if int(i) in owners:
                raise CheckFailed(f"{where}：下标 {int(i)} 同时分给了 rank {owners[int(i)]} 和 rank {rank}；"
                                  "每个下标只能属于一个 Rank。")
            owners[int(i)] = rank
        loads.append(sum(costs[int(i)] for i in mine))
    missing = sorted(set(range(len(costs))) - set(owners))
    if missing:
        raise CheckFailed(f"{where}：下标 {missing[0]} 没有分给任何 Rank（共漏掉 {len(missing)} 个）。")
    if costs:
        bound = sum(costs) / world_size + max(costs)
        worst = max(range(world_size), key=lambda r: loads[r])
        if loads[worst] > bound + 1e-9:
            raise CheckFailed(f"{where}：rank {worst} 的总成本 {loads[worst]:g} 超过了 平均 + 最大单项 = "
                              f"{bound:g}；各 Rank 的负载是 {loads}。试试：按成本从大到小，每次分给当前最轻的 Rank。")


def check_shard_by_cost(fn, examples: int = 150) -> None:
    """``fn(costs, rank, world_size) -> list of item indices``: reproducible, each index exactly once,
    ``max load <= total / world_size + max(costs)``. Property-tested on random inputs (hypothesis)."""
    what = "shard_by_cost 要把每个下标恰好分给一个 Rank，并按成本均衡"
    call(fn, what, [3.0, 1.0, 2.0], 0, 2)     # a stub fails here, before the random search
    # Skewed cases first: sharding by count (round robin) passes many random inputs but none of these.
    for costs, ws in (([20, 0] * 3, 2), ([20, 1, 1, 1] * 3, 4), ([9, 9, 9, 1, 1, 1], 3)):
        _shard_property(fn, costs, ws)
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:   # hypothesis is a test extra: fall back to plain random examples
        rng = random.Random()
        for _ in range(examples):
            costs = [rng.randint(0, 20) for _ in range(rng.randint(0, 25))]
            _shard_property(fn, costs, rng.randint(1, 6))
    else:
        prop = given(st.lists(st.integers(0, 20), max_size=25), st.integers(1, 6))(
            lambda costs, ws: _shard_property(fn, costs, ws))
        settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                 suppress_health_check=list(HealthCheck), print_blob=False)(prop)()
    passed(f"shard_by_cost 在 {examples} 组随机成本上：可重复、每个下标恰好一次、最大负载 ≤ 平均 + 最大单项。")


MEMORY_STRATEGIES = ("replicate", "data_parallel", "zero1", "zero2", "zero3")


def check_rank_memory(fn) -> None:
    """``fn(strategy, n, params, grads, optimizer, activations) -> float``: memory of each rank (equal shares)."""
    from mgpu_helpers.models import memory

    what = "rank_memory 要按策略算出每个 Rank 需要的显存"
    rng = random.Random()
    cases = [("replicate", 4, 6, 6, 12, 0)]       # the seed's 24 GB model on 4 GPUs: 24 GB on each
    cases += [(rng.choice(MEMORY_STRATEGIES), rng.randint(1, 8), *(rng.randint(0, 40) for _ in range(4)))
              for _ in range(60)]
    for strategy in MEMORY_STRATEGIES:
        cases.append((strategy, rng.randint(2, 8), *(rng.randint(1, 40) for _ in range(4))))
    for strategy, n, p, g, o, a in cases:
        got = call(fn, what, strategy, n, p, g, o, a)
        want = memory.memory_plan(strategy, n, math.inf, p, g, o, a).ranks[0].total
        if got is None or not math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-9):
            split = memory.STRATEGIES[strategy]
            raise CheckFailed(f"{strategy}，n = {n}，params={p} grads={g} optimizer={o} activations={a}（GB）："
                              f"每个 Rank 应当是 {want:g} GB，实际得到 {got!r}。{strategy} 切分的部分："
                              f"{', '.join(split) or '没有（全部复制）'}，其余每个 Rank 都存一整份。")
    passed(f"rank_memory 在 {len(cases)} 组（策略、GPU 数、各部分大小）上都对。")
