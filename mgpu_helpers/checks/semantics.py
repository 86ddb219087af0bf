"""Checkers for ex07: collective semantics (uneven all-gather, all-reduce as reduce-scatter + all-gather, bytes sent per rank)."""
from __future__ import annotations

import numpy as np

from mgpu_helpers.checks.core import WORLD_SIZES, CheckFailed, call, compare, int_values, new_rng, passed, run_on_ranks


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


BYTES_HINTS = {
    "reduce": "Reduce 沿一条链把部分和传到 Root：除 Root 外每个 Rank 把整块 S 往下传一次，Root 只收不发。",
    "all_gather": "环上走 world_size - 1 步，每一步每个 Rank 只发一块 S / world_size。",
    "reduce_scatter": "和 All-Gather 一样走 world_size - 1 步、每步一块 S / world_size，只是收到后相加。",
    "all_reduce": "All-Reduce = Reduce-Scatter + All-Gather：两段的发送量加起来。",
}


def check_bytes_sent(fn, world_sizes=WORLD_SIZES, timeout: float = 60.0) -> None:
    """``fn(op, nbytes, world_size, rank) -> bytes``: the reader's number for the bytes rank ``rank`` sends in
    ``op`` (reduce to rank 0, all_reduce, all_gather, reduce_scatter) on a buffer of ``nbytes``. Compared
    with the bytes the ranks count as they run the collective (:mod:`mgpu_helpers.measure.bytes_sent`)."""
    from mgpu_helpers.launcher.launch import run_ranks
    from mgpu_helpers.measure import bytes_sent

    what = "bytes_each_rank_sends 要给出每个 Rank 在 Collective 里发出的字节数"
    rng = new_rng()
    for n in world_sizes:
        nbytes = bytes_sent.ELEMENT_BYTES * n * int(rng.integers(2, 40))
        answers = {(op, r): call(fn, what, op, nbytes, n, r) for op in bytes_sent.OPS for r in range(n)}
        counted = run_ranks(bytes_sent.count_bytes_sent, n, args=(nbytes,), timeout=timeout,
                            stream=False, quiet=True).values
        for op in bytes_sent.OPS:
            for r in range(n):
                got, want = answers[(op, r)], counted[r][op]
                try:
                    ok = got is not None and abs(float(got) - want) <= 1e-6 * max(1.0, want)
                except (TypeError, ValueError):
                    raise CheckFailed(f"{what}：{op} 的答案要是一个数（字节），现在是 {got!r}。") from None
                if not ok:
                    role = "（Root）" if op == "reduce" and r == 0 else ""
                    raise CheckFailed(f"{what}：world_size = {n}，S = {nbytes} 字节的 {op}，rank {r}{role} "
                                      f"数出来发了 {want} 字节，你的答案是 {got}。{BYTES_HINTS[op]}")
    passed(f"bytes_each_rank_sends 在 world_size = {', '.join(map(str, world_sizes))}、四种 Collective、"
           "每个 Rank 上都和运行时数出的字节一致。")
