"""Checkers for ex05: collectives built from point-to-point messages, and the bytes a ring all-reduce sends.

The rank-launching checkers are rows of one table (:class:`~mgpu_helpers.checks.core.RankProblem`);
:func:`check_ring_bytes_guess` holds the reader's number against bytes counted on running ranks.
"""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import (CheckFailed, RankProblem, call, int_values, passed, run_on_ranks, run_problem,
                                      which_rank)
from mgpu_helpers.models.bandwidth import bytes_sent_per_rank

P2P_ONLY = ("broadcast", "all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
            "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "gather", "scatter")

# The number-first exercise: one concrete ring all-reduce, the same for every reader.
GUESS_WORLD_SIZE = 4
GUESS_ELEMENTS = 1_000_000          # float32: S = 4,000,000 bytes


# -- broadcast ------------------------------------------------------------------------------------------------


def _broadcast_case(rng, world_size):
    length = int(rng.integers(1, 6))
    return [int_values(rng, length) for _ in range(world_size)], (int(rng.integers(0, world_size)),)


BROADCAST = RankProblem(
    name="broadcast_p2p", what="broadcast_p2p 要让每个 Rank 都拿到 src 的数据",
    make_case=_broadcast_case,
    reference=lambda inputs, extra, world_size: [inputs[extra[0]]] * world_size,
    explain=lambda case, rank, got: which_rank(got, case.inputs),
    where=lambda case, rank: f"world_size = {case.world_size}，src = {case.extra[0]}，rank {rank}",
    forbid=P2P_ONLY, done="broadcast_p2p 在 world_size = {sizes}、随机的 src 上都对。")


# -- all-gather -----------------------------------------------------------------------------------------------


def _gather_case(rng, world_size):
    length = int(rng.integers(1, 4))
    return [int_values(rng, length) for _ in range(world_size)], ()


def _explain_gather_order(case, rank, got):
    """A result of the right length with a piece in the wrong place: name the piece and whose data it is."""
    inputs = case.inputs
    length = len(inputs[0])
    if got is None or np.shape(got) != np.shape(case.expected[rank]):
        return ""
    for pos in range(case.world_size):
        piece = np.asarray(got[pos * length:(pos + 1) * length])
        if not np.allclose(piece, inputs[pos]):
            raise CheckFailed(f"world_size = {case.world_size}，rank {rank}：结果里第 {pos} 段（下标 {pos * length}.."
                              f"{(pos + 1) * length - 1}）应当是 rank {pos} 的数据 {inputs[pos].tolist()}，"
                              f"实际是 {piece.tolist()}{which_rank(piece, inputs)}。按 rank 顺序放，不是按收到的顺序。")
    return ""


ALL_GATHER = RankProblem(
    name="all_gather_p2p", what="all_gather_p2p 要把所有 Rank 的 x 按 rank 顺序拼起来",
    make_case=_gather_case,
    reference=lambda inputs, extra, world_size: [np.concatenate(inputs)] * world_size,
    explain=_explain_gather_order, forbid=P2P_ONLY,
    done="all_gather_p2p 在 world_size = {sizes} 上按 rank 顺序拼齐了。")


# -- ring all-reduce ------------------------------------------------------------------------------------------


def _ring_case(rng, world_size):
    length = int(rng.integers(world_size, 3 * world_size + 5))     # chunks of uneven length, none empty
    return [int_values(rng, length) for _ in range(world_size)], ()


RING_ALL_REDUCE = RankProblem(
    name="ring_all_reduce", what="ring_all_reduce 要先做 Reduce-Scatter 再做 All-Gather，得到所有 Rank 的和",
    make_case=_ring_case,
    reference=lambda inputs, extra, world_size: [np.sum(inputs, axis=0)] * world_size,
    explain=lambda case, rank, got: ("提示：对照 mh.lessons.ring.ring_schedule(world_size)，"
                                     "看每一步每个 Rank 应当发哪一块、收哪一块。"),
    where=lambda case, rank: f"world_size = {case.world_size}，长度 {len(case.inputs[0])}，rank {rank}",
    forbid=P2P_ONLY, done="ring_all_reduce 在 world_size = {sizes}、长度不能整除的张量上都等于总和。")


# -- bytes sent by each rank of a ring all-reduce ------------------------------------------------------------


def ring_bytes_per_rank(length: int, world_size: int, itemsize: int = 4) -> list[int]:
    """Bytes each rank sends in ``mh.lessons.ring.ring_all_reduce`` of ``length`` elements: the sizes of the
    chunks it sends at every step of the schedule (exact, also for uneven chunks)."""
    from mgpu_helpers.lessons.ring import chunk_bounds, ring_schedule

    bounds = chunk_bounds(length, world_size)
    sent = [0] * world_size
    for _phase, _step, who in ring_schedule(world_size):
        for rank, (send_chunk, _recv_chunk) in enumerate(who):
            start, stop = bounds[send_chunk]
            sent[rank] += (stop - start) * itemsize
    return sent


def formula_bytes(nbytes: float, world_size: int) -> float:
    """``2 (world_size - 1) / world_size * nbytes``: what each rank sends when the chunks are equal
    (the cost model's ``bytes_sent_per_rank`` for all_reduce)."""
    return bytes_sent_per_rank("all_reduce", nbytes, world_size)


def _bytes_case(rng, world_size):
    length = int(rng.integers(4 * world_size, 40 * world_size))    # mostly not divisible: uneven chunks
    return [np.zeros(length, dtype=np.float32) for _ in range(world_size)], ()


def _explain_bytes(case, rank, got):
    try:
        got = float(got)
    except (TypeError, ValueError):
        return "count_sent_bytes 要返回一个数（这个 Rank 发出的字节数）。"
    nbytes = 4 * len(case.inputs[0])
    want = case.expected[rank]
    if got == 0:
        return "一个字节都没数到：是不是包装没有装上（要在调用 ring_all_reduce 之前替换 dist.batch_isend_irecv）？"
    if got == 2 * want:
        return "正好是两倍：把收到的（irecv）也算进去了，只数 op.op is dist.isend 的那些。"
    if got == want / 2:
        return "正好是一半：只数到了一个阶段（Reduce-Scatter 和 All-Gather 各发 world_size - 1 块）。"
    if got == nbytes:
        return "那是整个张量的大小 S，不是这个 Rank 实际发出的字节数。"
    return f"（公式 2(n-1)/n·S 给出 {formula_bytes(nbytes, case.world_size):g}；块长不等时各 Rank 略有不同。）"


RING_BYTES = RankProblem(
    name="count_sent_bytes", what="count_sent_bytes 要数出这个 Rank 在 ring_all_reduce 里一共发出了多少字节",
    make_case=_bytes_case,
    reference=lambda inputs, extra, world_size: ring_bytes_per_rank(len(inputs[0]), world_size),
    explain=_explain_bytes,
    where=lambda case, rank: (f"world_size = {case.world_size}，{len(case.inputs[0])} 个 float32"
                              f"（S = {4 * len(case.inputs[0])} 字节），rank {rank}"),
    done="count_sent_bytes 在 world_size = {sizes} 上数出的字节数和 Ring 的调度表一致。")


def check_broadcast(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x, src)`` returns rank ``src``'s x on every rank (send/recv only)."""
    run_problem(BROADCAST, fn, world_sizes, timeout)


def check_all_gather(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns every rank's x concatenated in rank order (send/recv only)."""
    run_problem(ALL_GATHER, fn, world_sizes, timeout)


def check_ring_all_reduce(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: the ring all-reduce (sum) with isend/irecv; lengths need not divide."""
    run_problem(RING_ALL_REDUCE, fn, world_sizes, timeout)


def check_count_sent_bytes(fn, world_sizes=None, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` runs ``mh.lessons.ring.ring_all_reduce(x)`` and returns the bytes this
    rank sent, counted as the ranks run; compared with the schedule's exact count, rank by rank."""
    cases = run_problem(RING_BYTES, fn, world_sizes, timeout)
    for case in cases:
        nbytes = 4 * len(case.inputs[0])
        print(f"  world_size = {case.world_size}，S = {nbytes} 字节：每个 Rank 发出 {case.expected}，"
              f"2(n-1)/n·S = {formula_bytes(nbytes, case.world_size):g}")


def reference_count_sent_bytes(rank, world_size, x):
    """The checker's own count: wrap batch_isend_irecv, run the course's ring, return the bytes sent."""
    import torch.distributed as dist

    from mgpu_helpers.lessons.ring import ring_all_reduce

    sent = 0
    original = dist.batch_isend_irecv

    def counting(ops):
        nonlocal sent
        sent += sum(op.tensor.numel() * op.tensor.element_size() for op in ops if op.op is dist.isend)
        return original(ops)

    dist.batch_isend_irecv = counting
    try:
        ring_all_reduce(x)
    finally:
        dist.batch_isend_irecv = original
    return sent


def check_ring_bytes_guess(fn, timeout: float = 60.0) -> None:
    """Number first: ``fn()`` returns the reader's number of bytes one rank sends in a ring all-reduce of
    :data:`GUESS_ELEMENTS` float32 on :data:`GUESS_WORLD_SIZE` ranks; the bytes are then counted on running
    ranks and the guess is held against the count (within 1%)."""
    what = f"ring_bytes_guess：{GUESS_WORLD_SIZE} 个 Rank、{GUESS_ELEMENTS} 个 float32 时每个 Rank 发出的字节数"
    guess = call(fn, what)
    try:
        guess = float(guess)
    except (TypeError, ValueError):
        raise CheckFailed(f"{what}：要返回一个数（字节数），现在是 {guess!r}。") from None
    nbytes = 4 * GUESS_ELEMENTS
    inputs = [np.zeros(GUESS_ELEMENTS, dtype=np.float32) for _ in range(GUESS_WORLD_SIZE)]
    counted = run_on_ranks(reference_count_sent_bytes, what, GUESS_WORLD_SIZE, inputs, timeout=timeout)
    if len(set(counted)) != 1:
        raise CheckFailed(f"{what}：各 Rank 数到的字节数不一样：{counted}（块长应当相等）。")
    measured = counted[0]
    if abs(guess - measured) > 0.01 * measured:
        if guess == nbytes:
            why = "你的数正好是张量的大小 S：每个 Rank 并不把整个张量发出去，每一步只发一块。"
        elif abs(guess - measured / 2) <= 0.01 * measured:
            why = "正好是一半：别忘了 All-Gather 阶段也要发 world_size - 1 块。"
        elif abs(guess - 2 * nbytes) <= 0.01 * nbytes:
            why = "2S 是 world_size 很大时的极限；world_size = 4 时每个 Rank 发 2(n-1) 块，每块 S/n。"
        else:
            why = "数一数：两个阶段各几步？每一步发多大的一块？"
        raise CheckFailed(f"{what}：你的答案 {guess:.0f}，在 {GUESS_WORLD_SIZE} 个 Rank 上数到每个 Rank 发出 "
                          f"{measured} 字节。{why}")
    passed(f"你的答案 {guess:.0f} 字节；{GUESS_WORLD_SIZE} 个 Rank 上实测每个 Rank 发出 {measured} 字节"
           f"（S = {nbytes}，2(n-1)/n·S = {formula_bytes(nbytes, GUESS_WORLD_SIZE):g}）。")
