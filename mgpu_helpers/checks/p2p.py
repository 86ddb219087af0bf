"""Checkers for ex04: point-to-point messages."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import WORLD_SIZES, passed, compare, run_on_ranks, int_values, new_rng, which_rank


def check_pass_right(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` sends x to rank + 1 and returns what rank - 1 sent (a ring shift)."""
    what = "pass_right 要把 x 交给右边的 Rank，并返回从左边收到的张量"
    rng = new_rng()
    for n in world_sizes:
        length = int(rng.integers(1, 6))
        inputs = [int_values(rng, length) for _ in range(n)]
        got = run_on_ranks(fn, what, n, inputs, timeout=timeout)
        for r in range(n):
            left = (r - 1) % n
            hint = which_rank(got[r], inputs)
            compare(got[r], inputs[left], f"world_size = {n}，rank {r} 应当收到左边 rank {left} 的数据",
                     hint + "右边是 (rank + 1) % world_size，左边是 (rank - 1) % world_size。" if hint else "")
    passed(f"pass_right 在 world_size = {', '.join(map(str, world_sizes))} 上都把数据交给了右边，没有死锁。")


def check_ring_sum(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns the element-wise sum of every rank's x, passed round the ring."""
    what = "ring_sum 要沿环传递 world_size - 1 步，得到所有 Rank 的 x 之和"
    rng = new_rng()
    for n in world_sizes:
        length = int(rng.integers(1, 5))
        inputs = [int_values(rng, length) for _ in range(n)]
        got = run_on_ranks(fn, what, n, inputs, forbid=("all_reduce", "reduce", "all_gather"), timeout=timeout)
        want = np.sum(inputs, axis=0)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.shape(got[r]) == want.shape:
                for k in range(n):
                    partial = np.sum([inputs[(r - j) % n] for j in range(k)], axis=0) if k else None
                    if k and k < n and np.allclose(got[r], partial):
                        hint = f"只加了 {k} 个 Rank 的值：要传 world_size - 1 = {n - 1} 步，每一步把收到的加上。"
                        break
            compare(got[r], want, f"world_size = {n}，rank {r}", hint)
    passed(f"ring_sum 在 world_size = {', '.join(map(str, world_sizes))} 上每个 Rank 都得到了总和。")
