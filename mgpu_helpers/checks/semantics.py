"""Checkers for ex07: collective semantics (uneven all-gather, all-reduce as reduce-scatter + all-gather)."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import WORLD_SIZES, compare, int_values, new_rng, passed, run_on_ranks


def check_all_gather_uneven(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: x has a different length on each rank; return the concatenation in
    rank order on every rank."""
    what = "all_gather_uneven 要先交换长度、再收齐各 Rank 长度不同的片段，按 rank 顺序拼接"
    rng = new_rng()
    for n in world_sizes:
        lengths = [int(v) for v in rng.integers(1, 6, size=n)]
        if len(set(lengths)) == 1:
            lengths[0] += 1
        inputs = [int_values(rng, k) for k in lengths]
        want = np.concatenate(inputs)
        got = run_on_ranks(fn, what, n, inputs, timeout=timeout)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.size(got[r]) == n * max(lengths):
                hint = "长度等于 world_size x 最长片段：填充（padding）的部分要按每个 Rank 的真实长度截掉。"
            compare(got[r], want, f"world_size = {n}，各 Rank 长度 {lengths}，rank {r}", hint)
    passed(f"all_gather_uneven 在 world_size = {', '.join(map(str, world_sizes))}、各 Rank 长度不同的片段上都拼对了。")


def check_all_reduce_rs_ag(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: all-reduce (sum) as reduce-scatter then all-gather; len(x) % world_size == 0."""
    what = "all_reduce_rs_ag 要用 Reduce-Scatter + All-Gather 得到和 All-Reduce 一样的结果"
    rng = new_rng()
    for n in world_sizes:
        length = n * int(rng.integers(1, 4))
        inputs = [int_values(rng, length) for _ in range(n)]
        want = np.sum(inputs, axis=0)
        got = run_on_ranks(fn, what, n, inputs, forbid=("all_reduce",), timeout=timeout)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.size(got[r]) == length // n:
                hint = "这只是自己那一段（Reduce-Scatter 的结果）：再 All-Gather 一次拼回完整向量。"
            compare(got[r], want, f"world_size = {n}，长度 {length}，rank {r}", hint)
    passed(f"all_reduce_rs_ag 在 world_size = {', '.join(map(str, world_sizes))} 上与 All-Reduce 的结果相同。")
