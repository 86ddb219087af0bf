"""Checkers for ex05: collectives built from point-to-point messages, and the bytes a ring all-reduce sends."""

import math

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.lessons.ring import chunk_bounds, ring_all_reduce, ring_schedule
from mgpu_helpers.models.bandwidth import BUSBW_FACTORS, algbw, busbw, bytes_sent_per_rank
from mgpu_helpers.models.collectives import expected_outputs
from mgpu_helpers.models.comm_share import comm_share_speedup

# The number-first exercise: one concrete ring all-reduce, the same for every reader.
GUESS_WORLD_SIZE = 4
GUESS_ELEMENTS = 1_000_000  # float32: S = 4,000,000 bytes


def _broadcast_case(rng, world_size):
    """A source other than rank 0 on 2 and 3 ranks (larger: random), a zero in the data that is sent."""
    length = int(rng.integers(1, 6))
    inputs = [core.int_values(rng, length) for _ in range(world_size)]
    src = {1: 0, 2: 1, 3: 2}.get(world_size, int(rng.integers(0, world_size)))
    inputs[src][int(rng.integers(0, length))] = 0.0
    return inputs, (src,)


BROADCAST = core.RankProblem(
    name="broadcast_p2p",
    what="broadcast_p2p 要让每个 Rank 都拿到 src 的数据",
    make_case=_broadcast_case,
    reference=lambda inputs, extra, world_size: [inputs[extra[0]]] * world_size,
    explain=lambda case, rank, got: core.which_rank(got, case.inputs),
    where=lambda case, rank: f"world_size = {case.world_size}，src = {case.extra[0]}，rank {rank}",
    forbid=core.COLLECTIVE_CALLS,
    done="broadcast_p2p 在 world_size = {sizes}、随机的 src 上都对。",
)


def _gather_case(rng, world_size):
    """Equal lengths (all-gather's rule), a zero in the last rank's data."""
    length = int(rng.integers(1, 4))
    inputs = [core.int_values(rng, length) for _ in range(world_size)]
    inputs[-1][int(rng.integers(0, length))] = 0.0
    return inputs, ()


def _explain_gather_order(case, rank, got):
    """A result of the right length with a piece in the wrong place: name the piece and whose data it is."""
    inputs, length = case.inputs, len(case.inputs[0])
    if got is None or np.shape(got) != np.shape(case.expected[rank]):
        return ""
    for pos in range(case.world_size):
        piece = np.asarray(got[pos * length : (pos + 1) * length])
        if not np.allclose(piece, inputs[pos]):
            raise core.CheckFailed(
                f"world_size = {case.world_size}，rank {rank}：结果里第 {pos} 段（下标 {pos * length}.."
                f"{(pos + 1) * length - 1}）应当是 rank {pos} 的数据 {inputs[pos].tolist()}，"
                f"实际是 {piece.tolist()}{core.which_rank(piece, inputs)}。按 rank 顺序放，不是按收到的顺序。"
            )
    return ""


ALL_GATHER = core.RankProblem(
    name="all_gather_p2p",
    what="all_gather_p2p 要把所有 Rank 的 x 按 rank 顺序拼起来",
    make_case=_gather_case,
    reference=lambda inputs, extra, world_size: [np.concatenate(inputs)] * world_size,
    explain=_explain_gather_order,
    forbid=core.COLLECTIVE_CALLS,
    done="all_gather_p2p 在 world_size = {sizes} 上按 rank 顺序拼齐了。",
)


# The ring all-reduce: a sum computed some other way gives the same numbers (ex04's whole-tensor ring pass;
# gather to rank 0 and send back; the collective itself), so the values alone prove nothing. The ranks run the
# reader's function with every send counted and with the collectives and the course's own ring refused.
RING_FORBIDDEN_LIB = (
    "mgpu_helpers.lessons.ring.ring_all_reduce",
    "mgpu_helpers.lessons.ring.ring_all_reduce_steps",
    "mgpu_helpers.lessons.p2p.ring_pass",
)


def _ring_body(rank, world_size, fn, payload, calls):
    """:func:`run_ring`'s body on each rank: the reader's ring on every case, the sends of each logged."""
    cases, in_place = payload
    results = []
    for inputs in cases:
        x = core.rank_tensor(inputs[rank])
        start = len(calls)
        out = fn(x) if in_place else fn(rank, world_size, x)
        out = x if out is None and in_place else out
        sends = [(-1 if c.peer is None else int(c.peer), c.nbytes) for c in calls[start:] if c.name in core.SENDS]
        results.append((core.as_numpy(out), sends, out is x))
    return results


def _ring_cases(rng, world_size: int, short: bool) -> list:
    """Lengths that do not divide, a rank of zeros; ``short``: a length below the world size too (empty chunks)."""
    lengths = [3 * world_size + 1, int(rng.integers(world_size, 6 * world_size + 5))]
    if lengths[1] % world_size == 0:
        lengths[1] += 1
    if short and world_size > 2:
        lengths.append(world_size - 1)
    cases = [[core.int_values(rng, length) for _ in range(world_size)] for length in lengths]
    cases[0][-1][:] = 0.0  # a rank of zeros: a product or a copy instead of a sum shows
    return cases


def check_ring_sends(name: str, world_size: int, length: int, logs: list, direction: int) -> None:
    """The ring's rules, from each rank's logged sends: to the neighbour only, one chunk a message, 2(n - 1) chunks."""
    n, nbytes = world_size, length * 4
    chunk = -(-length // n) * 4  # the longest chunk, in bytes (float32)
    side = "右边 (rank + 1) % world_size " if direction == 1 else "左边 (rank - 1) % world_size "
    where = f"world_size = {n}，长度 {length}（S = {nbytes} 字节）"
    sent = [sum(b for _d, b in log) for log in logs]
    peers = [{d for d, _b in log} for log in logs]
    if n >= 3 and all(peers[r] == {0} for r in range(1, n)):
        raise core.CheckFailed(
            f"{name}，{where}：rank 1..{n - 1} 都只给 rank 0 发。先把数据收到 rank 0、加好再发回去，"
            f"结果是对的，但那是 Gather + Broadcast：rank 0 一个人发出 {sent[0]} 字节，别人都在等它。"
            f"环上每个 Rank 只给{side}发，每次一块。"
        )
    for rank, log in enumerate(logs):
        if wrong_peer := sorted(peers[rank] - {(rank + direction) % n}):
            raise core.CheckFailed(
                f"{name}，{where}：rank {rank} 给 rank {wrong_peer} 发了消息；"
                f"环上每个 Rank 只给{side}发（方向反了吗？）。"
            )
        biggest = max((b for _d, b in log), default=0)
        if biggest > chunk:
            whole = "，正好是整个张量：那是练习 04 的整张量沿环传递" if biggest == nbytes else ""
            raise core.CheckFailed(
                f"{name}，{where}：rank {rank} 一条消息发了 {biggest} 字节{whole}。Ring All-Reduce "
                f"每一步只发一块（最长的一块 {chunk} 字节）。"
            )
    formula = bytes_sent_per_rank("all_reduce", nbytes, n)
    if sum(sent) != round(n * formula) or max(sent) > 2 * (n - 1) * chunk:
        rank = max(range(n), key=lambda r: abs(sent[r] - formula))
        why = "多了：每个块在每个阶段只沿环走 world_size - 1 步。"
        if sum(sent) < round(n * formula):
            why = "少了：两个阶段各要走 world_size - 1 步，每步每个 Rank 发一块。"
        raise core.CheckFailed(
            f"{name}，{where}：各 Rank 发出的字节数是 {sent}，rank {rank} 的 {sent[rank]} "
            f"和环该发的 {formula:g} 差得太远，{why}"
        )


def run_ring(fn, direction: int, world_sizes, timeout: float) -> None:
    """Check the values (in place), then the sends. To the right (05's fill-in): ``fn(tensor)`` in place, also on
    lengths below the world size (its exchange skips empty chunks); to the left (ex05-3): ``fn(rank, size, x)``."""
    right = direction == 1
    name = "ring_all_reduce" if right else "ring_all_reduce_left"
    world_sizes = tuple(world_sizes or core.WORLD_SIZES)
    what = f"{name} 要用环（先 Reduce-Scatter 再 All-Gather）原地求出所有 Rank 的和"
    schedule = "向左的环里，每一步发的块号和收的块号怎样变？在纸上走一遍 3 个 Rank"
    if right:
        schedule = "对照 ring_schedule：每一步发哪块、收哪块"
    advice = "每一步的发送和接收要成组提交（exchange 或 batch_isend_irecv），循环走完 world_size - 1 步就停。"
    forbid, course, refusal = core.COLLECTIVE_CALLS, RING_FORBIDDEN_LIB, "自己写出两个阶段的循环。"
    rng = core.new_rng()
    for world_size in world_sizes:
        cases = _ring_cases(rng, world_size, short=right)
        runs = core.run_watched(
            fn, what, world_size, (cases, right), forbid, course, timeout, advice, refusal=refusal, body=_ring_body
        )
        res_values = [value for value, _calls in runs]
        for k, inputs in enumerate(cases):
            length = len(inputs[0])
            want = np.sum(inputs, axis=0)
            for rank in range(world_size):
                got, _log, same = res_values[rank][k]
                where = f"world_size = {world_size}，长度 {length}，rank {rank}"
                a, b = chunk_bounds(length, world_size)[(rank + direction) % world_size]  # done by reduce-scatter
                hint = ""
                if got is not None and np.shape(got) == np.shape(want) and not np.allclose(got, want):
                    hint = core.first_hint(
                        (np.allclose(got, inputs[rank]), "结果还是这个 Rank 自己的输入：收到的块加上了吗？"),
                        (
                            np.allclose(got[a:b], want[a:b]),
                            "只有 Reduce-Scatter 后完成的那一块是对的：All-Gather 阶段还要把完成的块传遍全环。",
                        ),
                        default=f"{schedule}；Reduce-Scatter 要加，All-Gather 直接覆盖。",
                    )
                core.compare(got, want, where, hint)
                if right and not same:
                    raise core.CheckFailed(f"{where}：要原地改写传进来的张量并返回它，返回的是另一个张量。")
            check_ring_sends(name, world_size, length, [res_values[r][k][1] for r in range(world_size)], direction)
    who, empty, side = ("你的 Ring All-Reduce", "含空块、", "右") if right else (name, "", "左")
    core.passed(
        f"{who} 在 world_size = {', '.join(map(str, world_sizes))}、长度不能整除（{empty}含全零的 Rank）时都等于总和；"
        f"每个 Rank 只给{side}边发，每条消息一块。"
    )


def check_ring_all_reduce_right(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """05's fill-in: ``fn(tensor)`` sums ``tensor`` in place with a ring to the right (rank + 1)."""
    run_ring(fn, 1, world_sizes, timeout)


def check_ring_all_reduce(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """ex05-3: ``fn(rank, world_size, x)``: the ring all-reduce (sum) turned round, every rank sending to rank - 1."""
    run_ring(fn, -1, world_sizes, timeout)


def ring_bytes_per_rank(length: int, world_size: int, itemsize: int = 4) -> list[int]:
    """Bytes each rank sends in ``ring_all_reduce`` of ``length`` elements, from the schedule (uneven chunks too)."""
    sizes = [(stop - start) * itemsize for start, stop in chunk_bounds(length, world_size)]
    return [sum(sizes[who[rank][0]] for _p, _s, who in ring_schedule(world_size)) for rank in range(world_size)]


def _bytes_case(rng, world_size):
    length = int(rng.integers(4 * world_size, 40 * world_size))  # mostly not divisible: uneven chunks
    return [np.zeros(length, dtype=np.float32) for _ in range(world_size)], ()


def _explain_bytes(case, rank, got):
    try:
        got = float(got)
    except (TypeError, ValueError):
        return "count_sent_bytes 要返回一个数（这个 Rank 发出的字节数）。"
    nbytes, want = 4 * len(case.inputs[0]), case.expected[rank]
    slips = (
        (0, "一个字节都没数到：是不是包装没有装上（要在调用 ring_all_reduce 之前替换 dist.batch_isend_irecv）？"),
        (2 * want, "正好是两倍：把收到的（irecv）也算进去了，只数 op.op is dist.isend 的那些。"),
        (want / 2, "正好是一半：只数到了一个阶段（Reduce-Scatter 和 All-Gather 各发 world_size - 1 块）。"),
        (nbytes, "那是整个张量的大小 S，不是这个 Rank 实际发出的字节数。"),
    )
    formula = f"（公式 2(n-1)/n·S 给出 {bytes_sent_per_rank('all_reduce', nbytes, case.world_size):g}；块长不等时各 Rank 略有不同。）"
    return next((text for value, text in slips if got == value), formula)


RING_BYTES = core.RankProblem(
    name="count_sent_bytes",
    what="count_sent_bytes 要数出这个 Rank 在 ring_all_reduce 里一共发出了多少字节",
    make_case=_bytes_case,
    reference=lambda inputs, extra, world_size: ring_bytes_per_rank(len(inputs[0]), world_size),
    explain=_explain_bytes,
    course=("mgpu_helpers.checks.collectives.reference_count_sent_bytes",),
    where=lambda case, rank: (
        f"world_size = {case.world_size}，{len(case.inputs[0])} 个 float32"
        f"（S = {4 * len(case.inputs[0])} 字节），rank {rank}"
    ),
    done="count_sent_bytes 在 world_size = {sizes} 上数出的字节数和 Ring 的调度表一致。",
)


def check_broadcast(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x, src)`` returns rank ``src``'s x on every rank (send/recv only)."""
    core.run_problem(BROADCAST, fn, world_sizes, timeout)


def check_all_gather(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)`` returns every rank's x concatenated in rank order (send/recv only)."""
    core.run_problem(ALL_GATHER, fn, world_sizes, timeout)


def check_count_sent_bytes(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)`` runs ``mh.lessons.ring.ring_all_reduce(x)`` and returns the bytes this rank sent."""
    for case in core.run_problem(RING_BYTES, fn, world_sizes, timeout):
        nbytes = 4 * len(case.inputs[0])
        print(
            f"  world_size = {case.world_size}，S = {nbytes} 字节：每个 Rank 发出 {case.expected}，"
            f"2(n-1)/n·S = {bytes_sent_per_rank('all_reduce', nbytes, case.world_size):g}"
        )


def reference_count_sent_bytes(rank, world_size, x):
    """The checker's own count: the bytes this rank sends in the course's ring."""
    with core.WatchedCalls() as watched:
        ring_all_reduce(x)
    return sum(c.nbytes for c in watched.calls if c.name in core.SENDS)


def check_ring_bytes_guess(fn, timeout: float = core.HANG_S) -> None:
    """Number first: ``fn()`` guesses the bytes one rank sends in a ring all-reduce of :data:`GUESS_ELEMENTS`
    float32 on :data:`GUESS_WORLD_SIZE` ranks, held against the bytes counted on running ranks (within 1%)."""
    what = f"ring_bytes_guess：{GUESS_WORLD_SIZE} 个 Rank、{GUESS_ELEMENTS} 个 float32 时每个 Rank 发出的字节数"
    guess = core.call(fn, what)
    guess = core.number_answer(guess, f"{what}：要返回一个数（字节数），现在是 {guess!r}。")
    nbytes = 4 * GUESS_ELEMENTS
    inputs = [np.zeros(GUESS_ELEMENTS, dtype=np.float32) for _ in range(GUESS_WORLD_SIZE)]
    measured = core.launch_check(reference_count_sent_bytes, what, GUESS_WORLD_SIZE, inputs, timeout=timeout)[0]
    near = lambda value, scale: abs(guess - value) <= 0.01 * scale
    if not near(measured, measured):
        why = core.first_hint(
            (guess == nbytes, "你的数正好是张量的大小 S：每个 Rank 并不把整个张量发出去，每一步只发一块。"),
            (near(measured / 2, measured), "正好是一半：别忘了 All-Gather 阶段也要发 world_size - 1 块。"),
            (
                near(2 * nbytes, nbytes),
                "2S 是 world_size 很大时的极限；world_size = 4 时每个 Rank 发 2(n-1) 块，每块 S/n。",
            ),
            default="数一数：两个阶段各几步？每一步发多大的一块？",
        )
        raise core.CheckFailed(
            f"{what}：你的答案 {guess:.0f}，在 {GUESS_WORLD_SIZE} 个 Rank 上数到每个 Rank 发出 {measured} 字节。{why}"
        )
    core.passed(
        f"你的答案 {guess:.0f} 字节；{GUESS_WORLD_SIZE} 个 Rank 上实测每个 Rank 发出 {measured} 字节"
        f"（S = {nbytes}，2(n-1)/n·S = {bytes_sent_per_rank('all_reduce', nbytes, GUESS_WORLD_SIZE):g}）。"
    )


# The three collectives 05 asks to predict; the reference is the model's expected_outputs (sum; all_gather: one
# flat list in rank order; reduce_scatter: rank r gets piece r of the sum).
EXPECTED_NAMES = ("all_reduce", "all_gather", "reduce_scatter")


def _explain_expected(name: str, inputs, rank: int, got) -> str:
    rows, g = np.asarray(inputs, dtype=np.float64), np.asarray(got, dtype=np.float64)
    n = len(rows)
    same = lambda a: np.shape(a) == np.shape(g) and np.allclose(a, g)
    rs = name == "reduce_scatter"
    other = next((k for k in range(n) if rs and k != rank and same(np.split(rows.sum(axis=0), n)[k])), None)
    row_sums, own_piece = name == "all_reduce" and same(rows.sum(axis=1)), rs and same(np.split(rows[rank], n)[rank])
    return core.first_hint(
        (same(rows[rank]), "这是这个 Rank 自己的输入：集合通信之后它手里有别人的数据了。"),
        (same(rows.mean(axis=0)), "这是平均值：op=SUM 是求和，不除以 world_size。"),
        (row_sums, "你把每个 Rank 自己的一行加成了一个数；All-Reduce 是各 Rank 之间按元素（按列）相加。"),
        (name == "all_gather" and same(rows[::-1].reshape(-1)), "顺序反了：第 k 段是 rank k 的数据。"),
        (rs and same(rows.sum(axis=0)), "这是完整的和（All-Reduce 的结果）；Reduce-Scatter 之后 rank r 只留第 r 段。"),
        (own_piece, "这是自己输入的第 r 段，没有求和：那是各自切一段，不是 Reduce-Scatter。"),
        (other is not None, f"这是第 {other} 段的和；rank {rank} 拿的是第 {rank} 段。"),
    )


def check_expected_outputs(fns: dict) -> None:
    """``fns[name](inputs) -> [output of rank 0, rank 1, ...]`` for each of :data:`EXPECTED_NAMES` given."""
    names = [name for name in EXPECTED_NAMES if name in fns]
    if not names:  # a dict with no known name would otherwise pass having checked nothing
        raise ValueError(f"give a function for one or more of {EXPECTED_NAMES}, not {sorted(fns)}")
    for name in names:
        what = f"expected_{name} 要给出 {name} 之后每个 Rank 手里的数"
        rng = core.new_rng()
        for n in core.WORLD_SIZES:  # lengths that do not divide (all_reduce, all_gather), a zero row
            length = n * int(rng.integers(1, 4)) if name == "reduce_scatter" else int(rng.integers(1, 3)) * n + 1
            inputs = [[0.0] * length] + [core.int_values(rng, length).tolist() for _ in range(n - 1)]
            got = core.call(fns[name], what, [list(r) for r in inputs])
            want = expected_outputs(name, inputs)
            where = f"expected_{name}，{n} 个 Rank，输入 {[[int(v) for v in r] for r in inputs]}"
            core.expect_items(got, n, f"{where}：要返回一个列表，每个 Rank 一项（{n} 项），实际得到 {got!r:.80}。")
            for rank in range(n):
                hint = _explain_expected(name, inputs, rank, got[rank])
                core.compare(got[rank], want[rank], f"{where}，rank {rank}", hint)
    core.passed(
        f"{'、'.join('expected_' + name for name in names)} 算对了（2、3、4 个 Rank，长度不能整除，含全零的 Rank）。"
    )


def try_expected_outputs(expected_all_reduce, expected_all_gather, expected_reduce_scatter) -> dict:
    """05's fill-in, ``{name: fn}``: each of the three predictions through :func:`~mgpu_helpers.checks.core.fill_in`."""
    given = dict(zip(EXPECTED_NAMES, (expected_all_reduce, expected_all_gather, expected_reduce_scatter)))
    return {
        name: core.fill_in(
            fn,
            lambda fn, name=name: check_expected_outputs({name: fn}),
            lambda inputs, name=name: expected_outputs(name, inputs),
            f"expected_{name}",
        )
        for name, fn in given.items()
    }


try_expected_outputs.checker = check_expected_outputs.__name__  # the name its passing is recorded under


# busbw: one check for each collective the course asks it of (05: all-reduce; 12: reduce-scatter and all-gather;
# 11: a number read off a run).


def busbw_mistake(got, op: str, nbytes: float, seconds: float, world_size: int, unit: float = 1.0, rel_tol=1e-6):
    """None when ``got`` is ``op``'s busbw (bytes/s over ``unit``: 1 for bytes/s, 1e9 for GB/s, within ``rel_tol``),
    else what the usual wrong answer it matches says ("" when none does)."""
    n, factor, alg = world_size, BUSBW_FACTORS[op], algbw(nbytes, seconds)
    want = busbw(op, nbytes, seconds, world_size)  # bytes/s
    if math.isclose(got, want / unit, rel_tol=rel_tol, abs_tol=1e-9):
        return None
    if world_size == 1:
        return "一个 Rank 时没有人可发：busbw 是 0（系数里的 n-1 是 0）。"
    # the factor as the ranks grow many, and the other op's factor (counting one phase of an all-reduce, or both)
    limit, other = (2.0, "reduce_scatter") if op == "all_reduce" else (1.0, "all_reduce")
    one_phase = "2(n-1)/n 是 All-Reduce 的系数；Reduce-Scatter 和 All-Gather 各只是 All-Reduce 的一半。"
    if op == "all_reduce":
        one_phase = "只数了一个阶段：Reduce-Scatter 之后，All-Gather 阶段每个 Rank 也要发。"
    slips = [
        (alg, "这是 algbw = S/t，还没乘修正系数：数一数每个 Rank 发出的字节是 S 的几倍（自己那一块留在手里）。"),
        (alg * limit, f"{limit:g} 是 Rank 很多时的极限；{n} 个 Rank 时每个 Rank 发出的比 {limit:g}S 少。"),
        (alg * factor(4) if n != 4 else None, "系数写死成了 4 个 Rank 的值：它随 world_size 变。"),
        (alg * BUSBW_FACTORS[other](n), one_phase),
        (want * n, "每一步只发 S/n 的一块，不是整个 Buffer：还要除以 n。"),
        (want / (n - 1) if n > 1 else None, "一块 S/n 要在环上走 n-1 步，不是一步。"),
        (2 * want, "乘了 2：busbw 是每个 Rank 单方向发出的速率，不算两个方向之和。"),
    ]
    slips = [(None if v is None else v / unit, text) for v, text in slips]
    if unit == 1.0:
        slips += [
            (factor(n) / alg, "倒过来了：带宽是字节除以秒。"),
            (want / 1e9, "单位：这里要的是字节/秒，不是 GB/s。"),
            (want / 2**30, "单位：这里要的是字节/秒，不是 GiB/s。"),
        ]
    else:
        slips += [
            (want * 1e9 / 2**30 / unit, "GB/s 用 10^9 字节，不是 2^30。"),
            (want * 1e3 / unit, "数量级不对：t 打印的单位是 ms。"),
            (want / 1e3 / unit, "数量级不对：t 打印的单位是 ms。"),
        ]
    return core.matching_hint(got, slips, rel_tol=rel_tol)


def hold_busbw(fn, op: str, name: str, cases=()) -> int:
    """``fn(nbytes, seconds, world_size) -> bytes/s``: ``op``'s busbw on fixed cases (eight ranks first: the wrong
    factors differ there), ``cases`` and random ones. The caller says what passed (progress records its name)."""
    shown = {"all_reduce": "All-Reduce", "reduce_scatter": "Reduce-Scatter / All-Gather"}[op]
    what = f"{name} 要算出 {shown} 的 busbw（字节/秒）"
    rng = core.new_rng()
    cases = [(1e9, 1.0, 8), (1e9, 1.0, 2), (3 * 2**20, 0.002, 1), (1000.0, 1e-5, 3), *cases]
    cases += [
        (float(rng.integers(1, 2**31)), float(rng.uniform(1e-5, 2.0)), int(rng.integers(2, 17))) for _ in range(20)
    ]
    for (nbytes, seconds, n), got in core.answers(fn, what, cases):
        where = f"S = {nbytes:g} 字节，t = {seconds:g} 秒，n = {n}"
        got = core.number_answer(got, f"{where}：要返回一个数（字节/秒），实际得到 {got!r}。")
        if (why := busbw_mistake(got, op, nbytes, seconds, n)) is not None:
            want = busbw(op, nbytes, seconds, n)
            raise core.CheckFailed(f"{where}：busbw 应当是 {want:.6g} 字节/秒，你的函数给出 {got:.6g}。{why}")
    return len(cases)


def check_all_reduce_busbw(fn) -> None:
    """``fn(nbytes, seconds, world_size) -> bytes/s``: an all-reduce's bus bandwidth (:func:`hold_busbw`)."""
    count = hold_busbw(fn, "all_reduce", "all_reduce_busbw")
    core.passed(f"all_reduce_busbw 在 {count} 组（含 n = 1、2、8）上都对。")


def check_comm_share_speedup(fn) -> None:
    """``fn(share_before, share_after) -> speed-up``: compute fixed, communication's share of the step drops."""
    what = "comm_share_speedup 要算出通信占比从 before 降到 after 时每步快几倍"
    rng = core.new_rng()
    cases = [(0.3, 0.1), (0.5, 0.5), (0.0, 0.0), (0.2, 0.0), (0.9, 0.3)]
    cases += [tuple(float(v) for v in sorted(rng.uniform(0, 0.95, 2), reverse=True)) for _ in range(20)]
    for (before, after), got in core.answers(fn, what, cases):
        want = comm_share_speedup(before, after)
        where = f"通信占一步 {before:.0%} → {after:.0%}"
        got = core.number_answer(got, f"{where}：要返回一个数（快了几倍），实际得到 {got!r}。")
        if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        ratio = before / after if after > 0 else None
        mixed = 1 / (1 - before + after)  # the shares taken for the steps' lengths
        guesses = [
            ((1 - before) / (1 - after) if after < 1 else None, "倒过来了：快了几倍是 旧步时 ÷ 新步时，应当大于 1。"),
            (ratio, "占比之比不是步时之比：先用不变的计算时间把两次的一步各写出来，再相除。"),
            (1 + before - after, "占比相减不是步时之比：先用不变的计算时间把两次的一步各写出来。"),
            (mixed, "通信占一步的 s 时，计算占 1 - s：计算时间不变，一步就是计算时间的几倍？两次分别算出来再相除。"),
        ]
        why = core.matching_hint(got, guesses, rel_tol=1e-9)
        raise core.CheckFailed(f"{where}：每步应当快 {want:.4g} 倍，你的函数给出 {got:.4g}。{why}")
    core.passed(f"comm_share_speedup 在 {len(cases)} 组占比上都对（含占比不变、降到 0）。")


def reference_first_out_of_step(calls):
    """Notebook 05's mismatch, found as TORCH_DISTRIBUTED_DEBUG=DETAIL finds it: the number (from 0) of the first
    collective on which the ranks' ``(name, count)`` calls differ, or None. A rank that has no k-th call while
    another has one is out of step at k (the others wait for it)."""
    longest = max((len(c) for c in calls), default=0)
    return next((k for k in range(longest) if len({tuple(c[k]) if k < len(c) else None for c in calls}) > 1), None)


OPS = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")


def check_first_out_of_step(fn) -> None:
    """``fn(calls) -> k or None`` on fixed lists of each rank's (name, count) calls that each expose one slip, then
    random ones (2 to 5 ranks, in step or one rank off)."""
    what = "first_out_of_step 要找出第一个步调不一致的集合通信的序号"
    rng, a, b = core.new_rng(), ("all_reduce", 4), ("broadcast", 4)
    cases = [
        [[a, b], [b, a]],  # order: out of step at 0
        [[a, a], [a, a]],  # in step
        [[a, ("all_reduce", 8)], [a, a]],  # count only: 1
        [[a, a], [a]],  # one call fewer: 1
        [[a, a, a], [a, a, a], [a, a, b]],  # only the last rank differs: 2
        [[a], [a], [a, b]],  # the last rank has one more: 1
        [[], []],  # nothing called: in step
    ]
    for _ in range(40):
        world_size, length = int(rng.integers(2, 6)), int(rng.integers(1, 6))
        common = [(str(rng.choice(OPS)), int(rng.choice((4, 8, 16)))) for _ in range(length)]
        calls = [list(common) for _ in range(world_size)]
        if rng.random() < 0.8:
            r, k = int(rng.integers(0, world_size)), int(rng.integers(0, length))
            kind, (name, count) = int(rng.integers(0, 3)), calls[r][k]
            other = "all_gather" if name != "all_gather" else "broadcast"
            if kind == 2:
                del calls[r][k:]  # the rank stops calling
            else:
                calls[r][k] = (name, count * 2) if kind == 0 else (other, count)
        cases.append(calls)
    for (calls,), got in core.answers(fn, what, [([list(c) for c in case],) for case in cases]):
        want = reference_first_out_of_step(calls)
        if got == want and (got is None) == (want is None) and not isinstance(got, bool):
            continue
        shown = "；".join(f"rank {r}: {[f'{n}({c})' for n, c in rank]}" for r, rank in enumerate(calls))
        names_only = reference_first_out_of_step([[(n, 0) for n, _c in rank] for rank in calls])
        shortest = min(len(c) for c in calls)
        zipped = next((k for k in range(shortest) if len({tuple(c[k]) for c in calls}) > 1), None)
        why = core.first_hint(
            (want is not None and got == want + 1, "序号从 0 数起：第一个集合通信是 0 号。"),
            (
                got == names_only and got != want,
                "只比了名字：同一种集合通信、元素个数不同，也对不上（count 也要一样）。",
            ),
            (
                got == zipped and shortest < max(len(c) for c in calls),
                "有的 rank 调用得少：它没有第 k 个调用时，别的 rank 会在第 k 个调用里一直等它，这也是步调不一致（zip 会悄悄截掉多出来的调用）。",
            ),
            (got == reference_first_out_of_step(calls[:2]) and len(calls) > 2, "要比所有 rank，不只是前两个。"),
            default="第 k 个调用上，所有 rank 的 (名字, 个数) 要完全一样；找出第一个不一样的 k，都一样时返回 None。",
        )
        raise core.CheckFailed(f"{shown}\n应当是 {want!r}，你的函数给出 {got!r}。{why}")
    core.passed(f"first_out_of_step 在 {len(cases)} 组调用上都找对了（含顺序、个数、少一个调用、全都一致）。")


try_ring_all_reduce = core.fill_in_cell(
    check_ring_all_reduce_right, "mgpu_helpers.lessons.ring.ring_all_reduce", "Ring All-Reduce"
)
try_all_reduce_busbw = core.fill_in_cell(
    check_all_reduce_busbw,
    lambda nbytes, s, n: busbw("all_reduce", nbytes, s, n),
    "All-Reduce 的 busbw",
    keep="all_reduce_busbw",
    lesson="05",
)  # 11, 12: mh.mine
try_comm_share_speedup = core.fill_in_cell(check_comm_share_speedup, comm_share_speedup, "通信占比下降后每步快几倍")
try_first_out_of_step = core.fill_in_cell(
    check_first_out_of_step, reference_first_out_of_step, "第一个步调不一致的集合通信"
)
