"""Checkers of notebook 07 and ex07, collective semantics: fill-ins for the bytes each rank sends and an uneven
all-gather; exercises checked against the calls traced in each rank (other collectives refused)."""

import functools
import math
import random

import numpy as np

from mgpu_helpers.checks import core

RS_NAMES = ("reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base")
AG_NAMES = ("all_gather", "all_gather_into_tensor", "_all_gather_base")


ORDER = "多半是各 Rank 调用的 Collective 次序或大小对不上。"  # what to check on a hang


def run_traced(fn, what: str, n: int, inputs, extra, allowed, timeout: float, rule: str):
    """``fn(rank, n, x, *extra)`` on ``n`` ranks, a call outside ``allowed`` refused: ``[(value, calls)]`` per rank."""
    forbid, payload = set(core.DIST_CALLS) - set(allowed), (inputs, tuple(extra), "float32")
    return core.run_watched(fn, what, n, payload, forbid, (), timeout, advice=ORDER, rule=rule)


def _uneven_lengths(rng, n: int, high: int) -> list[int]:
    """``n`` lengths below ``high``, never all equal; from 3 ranks on one of them (not rank 0's) is 0: every run."""
    lengths = [int(v) for v in rng.integers(1, high, size=n)]
    if n > 2:
        lengths[int(rng.integers(1, n))] = 0
    elif len(set(lengths)) == 1:
        lengths[0] += 1
    return lengths


def check_all_gather_uneven(fn, world_sizes=core.WORLD_SIZES, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)``, x of a different length on each rank: their concatenation in rank order."""
    what = "all_gather_uneven 要先交换长度、再收齐各 Rank 长度不同的片段，按 rank 顺序拼接"
    rng = core.new_rng()
    for n in world_sizes:
        lengths = _uneven_lengths(rng, n, 6)
        inputs = [core.int_values(rng, k) for k in lengths]
        longest = int(np.argmax(lengths))
        inputs[longest][int(rng.integers(0, lengths[longest]))] = 0.0  # zeros in the data
        want, backwards = np.concatenate(inputs), np.concatenate(inputs[::-1])
        got = core.launch_check(fn, what, n, inputs, timeout=timeout, course=(reference_all_gather_uneven,))
        for r in range(n):
            padded = got[r] is not None and np.size(got[r]) == n * max(lengths)
            reversed_ = isinstance(got[r], np.ndarray) and np.array_equal(got[r], backwards)
            hint = core.first_hint(
                (padded, "长度等于 world_size x 最长片段：填充（padding）的部分要按每个 Rank 的真实长度截掉。"),
                (reversed_, "片段的顺序反了：rank 0 的片段在最前，然后是 rank 1、rank 2……"),
            )
            core.compare(got[r], want, f"world_size = {n}，各 Rank 长度 {lengths}，rank {r}", hint)
    core.passed(
        f"all_gather_uneven 在 world_size = {', '.join(map(str, world_sizes))}、各 Rank 长度不同的片段上都拼对了。"
    )


def check_all_reduce_rs_ag(fn, world_sizes=core.WORLD_SIZES, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)``: all-reduce (sum) as reduce-scatter then all-gather; the all-gathers may fill no
    more than ``len(x)`` elements (an all-gather of the whole x, summed locally, moves n times that)."""
    what = "all_reduce_rs_ag 要用 Reduce-Scatter + All-Gather 得到和 All-Reduce 一样的结果"
    rng = core.new_rng()
    for n in world_sizes:
        length = n * int(rng.integers(1, 4))
        inputs = [core.int_values(rng, length) for _ in range(n)]
        inputs[-1][:] = 0.0  # zeros in the data
        rule = "dist.reduce_scatter 和 dist.all_gather"
        got = run_traced(fn, what, n, inputs, (), RS_NAMES + AG_NAMES, timeout, rule)
        for r, (value, calls) in enumerate(got):
            names = [c.name.removeprefix("dist.") for c in calls]
            gathered = sum(c.numel or 0 for c, name in zip(calls, names) if name in AG_NAMES)
            whole = "All-Gather 整个 x 再在本地求和：每个 Rank 收下 n 倍的数据，这不是 Reduce-Scatter + All-Gather。"
            core.fail_first(
                (
                    not any(c in RS_NAMES for c in names),
                    f"{what}：world_size = {n}，rank {r} 没有调用 dist.reduce_scatter"
                    f"（调用了 {names or '无'}）。{whole if gathered >= n * length else ''}",
                ),
                (
                    gathered > length,
                    f"{what}：world_size = {n}，rank {r} 的 All-Gather 一共收了 {gathered} 个元素，"
                    f"而完整结果只有 {length} 个：只需 All-Gather 每个 Rank 归约好的那一段（{length // n} 个）。",
                ),
            )
            own_part = value is not None and np.size(value) == length // n
            hint = "这只是自己那一段（Reduce-Scatter 的结果）：再 All-Gather 一次拼回完整向量。" if own_part else ""
            core.compare(value, np.sum(inputs, axis=0), f"world_size = {n}，长度 {length}，rank {r}", hint)
    core.passed(
        f"all_reduce_rs_ag 在 world_size = {', '.join(map(str, world_sizes))} 上与 All-Reduce 的结果相同，"
        "只用了 Reduce-Scatter 和 All-Gather，All-Gather 只搬了每个 Rank 的那一段。"
    )


# -- 07: the bytes each rank sends, as arithmetic (all_reduce last: 07 builds it from reduce_scatter) -----------
LESSON_OPS = ("reduce", "broadcast", "all_gather", "reduce_scatter", "all_reduce")
BYTES_WHY = {
    "reduce": "Reduce 沿链 n-1 → … → 1 → 0 传部分和：除 Root 外每个 Rank 把整块往下传一次，Root 只收不发。",
    "broadcast": "Broadcast 沿链 0 → 1 → … → n-1 往下传：除了链尾，每个 Rank 把整块往下传一次；链尾只收不发。",
    "all_gather": "环上走 n - 1 步（自己那一块不用发给自己），每一步每个 Rank 只发一块 S / n。",
    "reduce_scatter": "和 All-Gather 一样走 n - 1 步、每步一块 S / n，只是收到后相加。",
    "all_reduce": "All-Reduce = Reduce-Scatter + All-Gather：两段各 (n-1)/n · S，加起来。",
}


def reference_bytes_each_rank_sends(op, nbytes, world_size, rank):
    """The checker's reference: bytes rank ``rank`` sends in ``op`` (ring for all-gather / reduce-scatter, both
    for all-reduce; a chain ``n-1 -> ... -> 0`` for reduce and ``0 -> 1 -> ... -> n-1`` for broadcast, root 0)."""
    one_pass = (world_size - 1) * nbytes // world_size
    sends = dict(reduce=0 if rank == 0 else nbytes, broadcast=0 if rank == world_size - 1 else nbytes)
    sends |= dict(all_gather=one_pass, reduce_scatter=one_pass, all_reduce=2 * one_pass)
    if op not in sends:
        raise ValueError(f"unknown collective {op!r}; one of {LESSON_OPS}")
    return sends[op]


def check_bytes_each_rank_sends(fn) -> None:
    """``fn(op, nbytes, world_size, rank) -> bytes`` sent in ``op`` (root 0), the root and chain ends every run."""
    what = "bytes_each_rank_sends 要给出每个 Rank 在 Collective 里发出的字节数"
    ours = ("mgpu_helpers.runs.bytes_sent", "mgpu_helpers.models.bandwidth")
    core.refuse_course_code(fn, what, [reference_bytes_each_rank_sends], packages=ours)
    rng = random.Random()
    sizes = [(1, 4096), (2, 48 * 1024), (3, 24 * 1024), (4, 48 * 1024), (5, 5 * 1000), (8, 8 * 4)]
    sizes += [(w, w * 4 * rng.randint(1, 5000)) for w in (rng.randint(2, 8) for _ in range(6))]
    cases = [(op, nbytes, ws, rank) for ws, nbytes in sizes for op in LESSON_OPS for rank in range(ws)]
    for (op, nbytes, world_size, rank), got in core.answers(fn, what, cases):
        want = reference_bytes_each_rank_sends(op, nbytes, world_size, rank)
        value = None  # None or a bool: named as a wrong count
        if got is not None and not isinstance(got, bool):
            value = core.number_answer(got, f"{what}：{op} 的答案要是一个数（字节），现在是 {got!r}。")
        if value is not None and math.isclose(value, want, abs_tol=1e-6):
            continue
        role = "（Root）" if rank == 0 and op in ("reduce", "broadcast") else ""
        role = "（链尾）" if op == "broadcast" and rank == world_size - 1 else role
        ring = op in ("all_gather", "reduce_scatter", "all_reduce") and world_size > 1 and value is not None
        n_steps = ring and math.isclose(value, want * world_size / (world_size - 1))
        extra = core.first_hint(
            (world_size == 1 and got, "只有一个 Rank 时没有别人可发：0 字节。"),
            (n_steps, "你数了 n 步；自己那一块不用发给自己，只要 n - 1 步。"),
        )
        raise core.CheckFailed(
            f"{what}：world_size = {world_size}，S = {nbytes} 字节的 {op}，rank {rank}{role} "
            f"应当发出 {want} 字节，你的答案是 {got!r}。{extra}{BYTES_WHY[op]}"
        )
    core.passed(
        f"bytes_each_rank_sends 在 {len(sizes)} 组（1 个 Rank、奇数个 Rank、Root 与链尾、随机大小）、"
        f"五种 Collective 的 {len(cases)} 个 Rank 上都对。"
    )


try_bytes_each_rank_sends = core.fill_in_cell(
    check_bytes_each_rank_sends, reference_bytes_each_rank_sends, "每个 Rank 发出的字节"
)


def reference_all_gather_uneven(rank, world_size, x):
    """The checker's reference: every rank's ``x`` (lengths differ) in rank order, sizes first, padding trimmed."""
    import torch
    import torch.distributed as dist

    n = torch.tensor([x.numel()], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    dist.all_gather(sizes, n)
    sizes = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(sizes), dtype=x.dtype, device=x.device)
    padded[: x.numel()] = x
    bufs = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(bufs, padded)
    return torch.cat([b[:k] for b, k in zip(bufs, sizes)])


def try_all_gather_uneven(fn):
    """07's fill-in: the learner's ``all_gather_uneven`` checked on 3 ranks, or the reference while unwritten."""
    check = functools.partial(check_all_gather_uneven, world_sizes=(3,))
    return core.fill_in(fn, check, reference_all_gather_uneven, "不等长片段的 All-Gather")


def check_reduce_scatter_uneven(fn, world_sizes=core.WORLD_SIZES, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x, sizes) -> tensor``: rank r's part ``sizes[r]`` of the sum over ranks (its offset the
    sum of the sizes before it). No all-reduce, no all-gather: nobody may receive the whole sum."""
    what = "reduce_scatter_uneven 要让 rank r 只拿到总和里属于自己的那一段（长度 sizes[r]）"
    rng = core.new_rng()
    rule = "dist.reduce_scatter（或逐段 dist.reduce），不许 All-Reduce 或 All-Gather"
    allowed = RS_NAMES + ("reduce",)
    for n in world_sizes:
        sizes = _uneven_lengths(rng, n, 5)
        inputs = [core.int_values(rng, sum(sizes)) for _ in range(n)]
        inputs[0][:] = 0.0 if n > 2 else inputs[0]  # zeros in the data
        whole, offsets = np.sum(inputs, axis=0), np.cumsum([0] + sizes)
        got = run_traced(fn, what, n, inputs, (sizes,), allowed, timeout, rule)
        for r, (value, _calls) in enumerate(got):
            hint = ""
            if value is not None and np.size(value) == max(sizes) and max(sizes) != sizes[r]:
                hint = "长度是最长的那一段：填充的部分要按 sizes[rank] 截掉。"
            elif value is not None and np.size(value) == sizes[r] and sizes[r] and r * sizes[r] != offsets[r]:
                equal_block = whole[r * sizes[r] : (r + 1) * sizes[r]]
                if equal_block.shape == np.shape(value) and np.allclose(value, equal_block):
                    hint = "取的是第 r 个等长块；各段长度不同，rank r 的起点是它前面各段长度之和。"
            want = whole[offsets[r] : offsets[r + 1]]
            core.compare(value, want, f"world_size = {n}，sizes = {sizes}，rank {r}", hint)
    core.passed(
        f"reduce_scatter_uneven 在 world_size = {', '.join(map(str, world_sizes))}、长度不同（含 0）的各段上，"
        "每个 Rank 都只拿到了自己那一段的总和。"
    )
