"""Checkers for ex03: process groups (where a rank runs, and joining a group by hand)."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import CheckFailed, RankProblem, call, int_values, new_rng, passed, run_problem

FIELDS = ("node", "local_rank", "physical_gpu")


def reference_placement(rank: int, nproc_per_node: int, visible: list[int]) -> tuple[int, int, int]:
    """Where global ``rank`` runs when every node starts ``nproc_per_node`` ranks and rank k of a node uses
    ``cuda:k``, with ``CUDA_VISIBLE_DEVICES`` = ``visible`` on every node: ``(node, local_rank, physical GPU)``."""
    local_rank = rank % nproc_per_node
    return rank // nproc_per_node, local_rank, visible[local_rank]


def _placement_cases(rng, count: int = 40):
    cases = [(5, 4, [0, 1, 2, 3]), (1, 2, [1, 0]), (6, 8, [7, 6, 5, 4, 3, 2, 1, 0])]   # the easy-to-miss ones
    for _ in range(count):
        nproc = int(rng.integers(1, 9))
        visible = [int(g) for g in rng.permutation(8)[:nproc]]
        cases.append((int(rng.integers(0, 4 * nproc)), nproc, visible))
    return cases


def _explain_placement(field: str, rank: int, nproc: int, visible: list[int], got) -> str:
    if field == "node":
        return "每台机器起 nproc_per_node 个进程，rank 按机器依次编号：第几台机器看整除。"
    if field == "local_rank":
        if got == rank:
            return "local_rank 是这台机器上的编号，不是全局的 rank：两台机器各有自己的 0, 1, ……"
        return "local_rank 是 rank 除以 nproc_per_node 的余数。"
    local = rank % nproc
    if got == local:
        return (f"cuda:{local} 是进程里看到的编号；CUDA_VISIBLE_DEVICES={','.join(map(str, visible))} 时它是"
                "列表里的第 local_rank 个物理 GPU。")
    return "物理 GPU 要从 CUDA_VISIBLE_DEVICES 的列表里按 local_rank 取。"


def check_placement(fn) -> None:
    """``fn(rank, nproc_per_node, visible) -> (node, local_rank, physical_gpu)`` on fixed and random cases."""
    what = "placement 要给出 (node, local_rank, physical_gpu)"
    for rank, nproc, visible in _placement_cases(new_rng()):
        got = call(fn, what, rank, nproc, list(visible))
        want = reference_placement(rank, nproc, visible)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed(f"{what}：要返回三个数 (node, local_rank, physical_gpu)，现在是 {got!r}。")
        for field, g, w in zip(FIELDS, got, want):
            if g != w:
                raise CheckFailed(f"rank {rank}，每台机器 {nproc} 个进程，CUDA_VISIBLE_DEVICES="
                                  f"{','.join(map(str, visible))}：{field} 应当是 {w}，你的是 {g}。"
                                  f"{_explain_placement(field, rank, nproc, visible, g)}")
    passed("placement 在几十种 (rank, nproc_per_node, CUDA_VISIBLE_DEVICES) 组合上都对。")


# -- joining a process group by hand (env://), as a script does ---------------------------------------------


def _join_case(rng, world_size):
    length = int(rng.integers(1, 5))
    return [int_values(rng, length) for _ in range(world_size)], ()


def _explain_join(case, rank, got):
    if got is not None and np.shape(got) == np.shape(case.inputs[rank]) and np.allclose(got, case.inputs[rank]):
        return "这是这个 Rank 自己的 x：加入进程组之后还要做一次 all_reduce。"
    return ""


JOIN_AND_SUM = RankProblem(
    name="join_and_sum", what="join_and_sum 要自己用 env:// 加入进程组，all_reduce 之后离开",
    make_case=_join_case,
    reference=lambda inputs, extra, world_size: [np.sum(inputs, axis=0)] * world_size,
    explain=_explain_join, init=False,
    done="join_and_sum 在 world_size = {sizes} 上自己加入、求和、离开了进程组。")


def check_join_and_sum(fn, world_sizes=None, timeout: float = 60.0) -> None:
    """``fn(rank, world_size, x)`` joins the default group itself (env://, backend from MGPU_BACKEND), sums
    x over all ranks, leaves the group and returns the sum."""
    run_problem(JOIN_AND_SUM, fn, world_sizes, timeout)
