"""Checkers for ex05: collectives built from point-to-point messages."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import (CheckFailed, WORLD_SIZES, compare, int_values, new_rng, passed, run_on_ranks,
                                      which_rank)


P2P_ONLY = ("broadcast", "all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
            "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "gather", "scatter")


def check_broadcast(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x, src)`` returns rank ``src``'s x on every rank (send/recv only)."""
    what = "broadcast_p2p 要让每个 Rank 都拿到 src 的数据"
    rng = new_rng()
    for n in world_sizes:
        src = int(rng.integers(0, n))
        length = int(rng.integers(1, 6))
        inputs = [int_values(rng, length) for _ in range(n)]
        got = run_on_ranks(fn, what, n, inputs, extra=(src,), forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            hint = which_rank(got[r], inputs)
            compare(got[r], inputs[src], f"world_size = {n}，src = {src}，rank {r}", hint)
    passed(f"broadcast_p2p 在 world_size = {', '.join(map(str, world_sizes))}、随机的 src 上都对。")


def check_all_gather(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns every rank's x concatenated in rank order (send/recv only)."""
    what = "all_gather_p2p 要把所有 Rank 的 x 按 rank 顺序拼起来"
    rng = new_rng()
    for n in world_sizes:
        length = int(rng.integers(1, 4))
        inputs = [int_values(rng, length) for _ in range(n)]
        want = np.concatenate(inputs)
        got = run_on_ranks(fn, what, n, inputs, forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            g = got[r]
            if g is not None and np.shape(g) == want.shape:
                for pos in range(n):
                    piece = np.asarray(g[pos * length:(pos + 1) * length])
                    if not np.allclose(piece, inputs[pos]):
                        src = which_rank(piece, inputs)
                        raise CheckFailed(f"world_size = {n}，rank {r}：结果里第 {pos} 段（下标 {pos * length}.."
                                          f"{(pos + 1) * length - 1}）应当是 rank {pos} 的数据 {inputs[pos].tolist()}，"
                                          f"实际是 {piece.tolist()}{src}。按 rank 顺序放，不是按收到的顺序。")
            compare(g, want, f"world_size = {n}，rank {r}")
    passed(f"all_gather_p2p 在 world_size = {', '.join(map(str, world_sizes))} 上按 rank 顺序拼齐了。")


def check_ring_all_reduce(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: the ring all-reduce (sum) with isend/irecv; lengths need not divide."""
    what = "ring_all_reduce 要先做 Reduce-Scatter 再做 All-Gather，得到所有 Rank 的和"
    rng = new_rng()
    for n in world_sizes:
        length = int(rng.integers(n, 3 * n + 5))     # chunks of uneven length, none empty
        inputs = [int_values(rng, length) for _ in range(n)]
        want = np.sum(inputs, axis=0)
        got = run_on_ranks(fn, what, n, inputs, forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            compare(got[r], want, f"world_size = {n}，长度 {length}，rank {r}",
                     "提示：块的边界用 collectives.chunk_bounds(len(x), world_size)，第 s 步发送块 (rank - s) % n。")
    passed(f"ring_all_reduce 在 world_size = {', '.join(map(str, world_sizes))}、长度不能整除的张量上都等于总和。")
