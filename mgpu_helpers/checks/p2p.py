"""Checkers for ex04: point-to-point messages (one :class:`~mgpu_helpers.checks.core.RankProblem` per exercise)."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import RankProblem, int_values, run_problem, which_rank

COLLECTIVE_CALLS = ("all_reduce", "reduce", "all_gather")


def _one_row_each(rng, world_size, longest=5):
    length = int(rng.integers(1, longest + 1))
    return [int_values(rng, length) for _ in range(world_size)], ()


def _from_the_left(inputs, _extra, world_size):
    return [inputs[(r - 1) % world_size] for r in range(world_size)]


def _explain_direction(case, rank, got):
    hint = which_rank(got, case.inputs)
    if hint and not np.allclose(got, case.expected[rank]):
        return hint + "右边是 (rank + 1) % world_size，左边是 (rank - 1) % world_size。"
    return ""


def _where_left(case, rank):
    left = (rank - 1) % case.world_size
    return f"world_size = {case.world_size}，rank {rank} 应当收到左边 rank {left} 的数据"


def _sum_of_all(inputs, _extra, world_size):
    return [np.sum(inputs, axis=0)] * world_size


def _explain_partial_sum(case, rank, got):
    world_size = case.world_size
    if got is None or np.shape(got) != np.shape(case.expected[rank]):
        return ""
    for k in range(1, world_size):
        partial = np.sum([case.inputs[(rank - j) % world_size] for j in range(k)], axis=0)
        if np.allclose(got, partial):
            return f"只加了 {k} 个 Rank 的值：要传 world_size - 1 = {world_size - 1} 步，每一步把收到的加上。"
    return ""


PASS_RIGHT = RankProblem(
    name="pass_right", what="pass_right 要把 x 交给右边的 Rank，并返回从左边收到的张量",
    make_case=_one_row_each, reference=_from_the_left, explain=_explain_direction, where=_where_left,
    done="pass_right 在 world_size = {sizes} 上都把数据交给了右边，没有死锁。")

RING_SUM = RankProblem(
    name="ring_sum", what="ring_sum 要沿环传递 world_size - 1 步，得到所有 Rank 的 x 之和",
    make_case=lambda rng, world_size: _one_row_each(rng, world_size, longest=4), reference=_sum_of_all,
    explain=_explain_partial_sum, forbid=COLLECTIVE_CALLS,
    done="ring_sum 在 world_size = {sizes} 上每个 Rank 都得到了总和。")


def check_pass_right(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` sends x to rank + 1 and returns what rank - 1 sent (a ring shift)."""
    run_problem(PASS_RIGHT, fn, world_sizes, timeout)


def check_ring_sum(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns the element-wise sum of every rank's x, passed round the ring."""
    run_problem(RING_SUM, fn, world_sizes, timeout)
