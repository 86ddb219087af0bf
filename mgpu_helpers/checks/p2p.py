"""Checkers of notebook 04 and ex04: point-to-point messages on ranks, the edge cases in every run (an odd world
size, tensors of length 0, zeros, float and integer dtypes, both directions). An exercise's rule ("blocking send/recv
only", "an empty buffer is not sent") is checked against the ``torch.distributed`` calls watched in each rank."""

import numpy as np

from mgpu_helpers.checks import core

NONBLOCKING = ("isend", "irecv", "batch_isend_irecv")
EXCHANGE, RING_PASS = "mgpu_helpers.lessons.p2p.exchange", "mgpu_helpers.lessons.p2p.ring_pass"
LESSON_CODE = (EXCHANGE, RING_PASS)
OWN_CODE = "这一题要你自己写出来：调用课程的实现不算。"  # what a refusal of the lesson's code says
SENTINEL = -7777
ROUNDS = (("right", "float32"), ("left", "int64"), ("right", "int64"), ("left", "float32"))  # exchange's, in order


def _check_rounds(fn, what: str, world_sizes, timeout, make_rounds, body, explain, lessons=LESSON_CODE) -> None:
    """Per world size, ``body`` on ranks with fresh rounds, then ``explain`` (raising on a mistake) on each result."""
    rng = core.new_rng()
    for world_size in world_sizes:
        rounds = make_rounds(rng, world_size)
        values = core.run_watched(fn, what, world_size, rounds, (), lessons, timeout, refusal=OWN_CODE, body=body)
        for rank, (out, _calls) in enumerate(values):
            for rnd, result in zip(rounds, out):
                explain(world_size, rnd, rank, result)


def _exchange_rounds(rng, world_size):
    """(direction, dtype, lengths sent by each rank, data of each rank) per round: both directions, a float and an
    integer dtype, uneven lengths, zeros in the data. In the first round of each direction every rank sends: a
    rank that sends nothing would break the ring's cycle of waits, and a blocking send-first answer get through."""
    rounds = []
    for k, (direction, dtype) in enumerate(ROUNDS):
        lengths = [int(n) for n in rng.integers(1, 6, size=world_size)]
        if k >= 2:
            lengths[int(rng.integers(0, world_size))] = 0  # one rank sends nothing this round
        data = [core.int_values(rng, n) for n in lengths]
        for v in data:
            if len(v) > 1:
                v[int(rng.integers(0, len(v)))] = 0  # zeros in the data
        rounds.append((direction, dtype, lengths, data))
    return rounds


def _peers(rank, world_size, direction):
    """``(dst, src)`` of ``rank`` in a round to the ``direction`` ("right": send to rank + 1, receive from rank - 1)."""
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    return (right, left) if direction == "right" else (left, right)


def _exchange_body(rank, world_size, fn, rounds, calls):
    """Each round every rank calls ``fn`` once and waits on what it returned."""
    out = []
    for direction, dtype, lengths, data in rounds:
        dst, src = _peers(rank, world_size, direction)
        send_buf = core.rank_tensor(data[rank], dtype)
        before, recv_buf, first = send_buf.clone(), core.rank_tensor(np.full(lengths[src], SENTINEL), dtype), len(calls)
        requests = fn(send_buf, dst, recv_buf, src)
        waitable = isinstance(requests, (list, tuple)) and all(hasattr(r, "wait") for r in requests)
        for request in requests if waitable else ():
            request.wait()
        got, kept = core.as_numpy(recv_buf), send_buf.equal(before)
        out.append(dict(kind=type(requests).__name__, waitable=waitable, got=got, calls=calls[first:], kept=kept))
    return out


def _explain_exchange_round(world_size, rnd, rank, result) -> None:
    direction, dtype, lengths, data = rnd
    dst, src = _peers(rank, world_size, direction)
    case = (
        f"world_size = {world_size}，rank {rank} 调用 exchange(send_buf, dst={dst}, recv_buf, src={src})"
        f"（{dtype}，send_buf 长 {lengths[rank]}，recv_buf 长 {lengths[src]}）"
    )
    empty = [c[0] for c in result["calls"] if c[0] in core.SENDS + core.RECVS and c[2] == 0] + [None]
    got, want = result["got"], np.asarray(data[src])
    # another rank's data, blamed only when it is not also what src sent (short random inputs can coincide)
    others = [k for k, inp in enumerate(data) if k != src and len(got) and np.array_equal(got, inp)]
    other = None if np.array_equal(got, want) else next(iter(others), None)
    lost = lengths[src] and np.all(got == SENTINEL)  # nothing arrived
    core.fail_first(
        (
            not result["waitable"],
            f"{case}：返回的是 {result['kind']}，应当是一个请求的列表（每个都有 .wait()）。"
            "用阻塞的 send/recv 做完了就返回空列表 []；成组提交时返回 batch_isend_irecv 给的列表。",
        ),
        (
            empty[0],
            f"{case}：发出了一个空张量的 {core.call_label(empty[0] or '')}。长度为 0 的缓冲区要跳过，不发也不收"
            "（下一节切块时块可能是空的，空消息只会白白多一次等待）。",
        ),
        (not result["kept"], f"{case}：send_buf 被改掉了。exchange 只往 recv_buf 里写，要发的数据不能动。"),
        (lost, f"{case}：recv_buf 里什么也没收到。要从 src 收，并且在返回之前把请求交出去（或者用阻塞的 recv 收完）。"),
        (
            other is not None,
            f"{case}：收到的是 rank {other} 的数据，应当是 src = rank {src} 的。"
            "dst 是发给谁，src 是从谁收：两个参数别用反。",
        ),
    )
    core.compare(got, want, case)


def check_exchange(fn, world_sizes=(2, 3), timeout: float = core.HANG_S) -> None:
    """``fn(send_buf, dst, recv_buf, src)`` once per rank round a ring, both ways: no deadlock, the right data."""
    what = "exchange 要把 send_buf 发给 dst、从 src 收进 recv_buf，整个环一起调用也不死锁"
    _check_rounds(fn, what, world_sizes, timeout, _exchange_rounds, _exchange_body, _explain_exchange_round)
    core.passed(
        f"exchange 在 world_size = {', '.join(map(str, world_sizes))} 上往右、往左都交换对了"
        "（长度不一、含 0 长度和 0 值、float32 与 int64），没有死锁，空缓冲区没有发。"
    )


def _ring_pass_body(rank, world_size, fn, cases, calls):
    out = []
    for _length, steps, dtype, data in cases:
        token = core.rank_tensor(data[rank], dtype)
        before = token.clone()
        arrived = fn(token, steps) if steps is not None else fn(token)
        kept = token.equal(before)
        arrived = [core.as_numpy(t) for t in arrived] if isinstance(arrived, (list, tuple)) else type(arrived).__name__
        out.append(dict(arrived=arrived, kept=kept))
    return out


def _ring_cases(rng, world_size):
    cases, short, longer = [], int(rng.integers(1, 5)), int(rng.integers(2, 5))
    for length, steps, dtype in ((short, None, "float32"), (0, None, "float32"), (longer, world_size + 1, "int64")):
        data = core.int_values(rng, (world_size, length))  # row r: rank r's token
        if length:  # tokens that differ, so that a token tells whose it is; rank 0's starts with a zero
            data[:, 0] = [0, *rng.choice(np.arange(1, 51), world_size - 1, replace=False)]
        cases.append((length, steps, dtype, data))
    return cases


def _explain_ring(world_size, case, rank, result):
    length, steps, dtype, data = case
    n_steps = world_size - 1 if steps is None else steps
    call = "ring_pass(token)" if steps is None else f"ring_pass(token, steps={steps})"
    where = f"world_size = {world_size}，rank {rank}，{call}（token 长 {length}，{dtype}）"
    arrived = result["arrived"]
    if not isinstance(arrived, list):
        raise core.CheckFailed(f"{where}：返回的是 {arrived}，应当是一个列表：每一步从左边收到的张量，按顺序。")
    own = "不给 steps 时走 world_size - 1 步：自己的 token 不用再收回来。" if steps is None else ""
    core.fail_first(
        (len(arrived) != n_steps, f"{where}：列表里有 {len(arrived)} 个张量，应当是 {n_steps} 个（每一步一个）。{own}"),
        (not result["kept"], f"{where}：token 被改掉了。每一步要收进一块新的缓冲区，传的是刚收到的那块。"),
    )
    for step, got in enumerate(arrived):
        origin = (rank - step - 1) % world_size
        want = np.asarray(data[origin])
        if np.shape(got) != np.shape(want):
            core.compare(got, want, f"{where}，第 {step + 1} 步")
        if not np.array_equal(got, want):
            k = next((k for k, inp in enumerate(data) if len(inp) and np.array_equal(got, inp)), None)
            own, reused = step and k == (rank - 1) % world_size, step and k == (rank - n_steps) % world_size
            hint = core.first_hint(
                (k is None, ""),
                (own, f"这是左边 rank {k} 自己的 token：它每一步都在发自己的 token。收到的东西要继续往右传。"),
                (reused, "每一步的结果都一样：多半是所有步共用了一块接收缓冲区，每一步要一块新的。"),
                default=f"那是 rank {k} 的 token；第 {step + 1} 步应当收到 rank {origin} 的。",
            )
            core.compare(got, want, f"{where}，第 {step + 1} 步应当收到 rank {origin} 的 token", hint)


def check_ring_pass(fn, world_sizes=(2, 3), timeout: float = core.HANG_S) -> None:
    """``fn(token, steps=None)`` inside a process group: the list of tokens that arrived from the left."""
    what = "ring_pass 要把 token 沿环往右传，返回每一步从左边收到的张量"
    # ring_pass builds on exchange: the course's exchange may be used (it is what 04 falls back to).
    _check_rounds(fn, what, world_sizes, timeout, _ring_cases, _ring_pass_body, _explain_ring, lessons=(RING_PASS,))
    core.passed(
        f"ring_pass 在 world_size = {', '.join(map(str, world_sizes))} 上每一步都收到了左边传来的 token"
        "（也走过不止一圈，也传过空张量和 int64）。"
    )


# -- ex04: the rules of the exercises are checked against the calls made ------------------------------------------
WORLD_SIZES = (2, 3, 4, 5)  # pass_right and ring_sum: rings of 2 to 5 ranks, even and odd


def _rank_fn_runs(fn, what: str, world_sizes, timeout: float, longest: int = 5):
    """``(world_size, inputs, results, calls)`` of ``fn(rank, world_size, x)`` on each world size, float32 and int64 by
    turns, one zero in rank 0's data (only one: a whole rank of zeros would hide a value added twice)."""
    rng = core.new_rng()
    for i, world_size in enumerate(world_sizes):
        length = int(rng.integers(1, longest + 1))
        inputs = [core.int_values(rng, length) for _ in range(world_size)]
        inputs[0][int(rng.integers(0, length))] = 0
        payload = (inputs, (), ("float32", "int64")[i % 2])
        values = core.run_watched(fn, what, world_size, payload, (), LESSON_CODE, timeout, refusal=OWN_CODE)
        yield world_size, inputs, [got for got, _ in values], [calls for _, calls in values]


def check_pass_right(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)`` sends x to rank + 1 and returns what rank - 1 sent, blocking send/recv only."""
    world_sizes = tuple(world_sizes or WORLD_SIZES)
    what = "pass_right 要只用阻塞的 send/recv 把 x 交给右边的 Rank，并返回从左边收到的张量"
    for world_size, inputs, results, calls in _rank_fn_runs(fn, what, world_sizes, timeout):
        for rank, got in enumerate(results):
            want = inputs[(rank - 1) % world_size]
            hint = core.which_rank(got, inputs)
            if hint and not np.array_equal(got, want):
                hint += "右边是 (rank + 1) % world_size，左边是 (rank - 1) % world_size。"
            where = f"world_size = {world_size}，rank {rank} 应当收到左边 rank {(rank - 1) % world_size} 的数据"
            core.compare(got, want, where, hint)
        why = "这一题只许用阻塞的 dist.send / dist.recv，靠收发的顺序避免死锁；非阻塞和成组提交留到练习 2。"
        core.refuse_calls(calls, NONBLOCKING, what, why)
        core.refuse_calls(calls, core.COLLECTIVE_CALLS, what, "这一题要用点对点的 send/recv 自己传，不能用集合通信。")
        for rank, rank_calls in enumerate(calls):
            sends = [c for c in rank_calls if c[0] == "dist.send"]
            if len(sends) != 1 or sends[0][1] != (rank + 1) % world_size:
                raise core.CheckFailed(
                    f"{what}：world_size = {world_size} 时 rank {rank} 发了 {len(sends)} 条消息"
                    f"（{[c[1] for c in sends]}），应当正好一条，发给右边的 rank {(rank + 1) % world_size}。"
                )
    core.passed(
        f"pass_right 在 world_size = {', '.join(map(str, world_sizes))} 上只用阻塞的 send/recv 就把数据交给了右边，"
        "没有死锁（奇数个 Rank 也一样）。"
    )


def _ring_sum_hint(got, total, inputs, rank, world_size) -> str:
    """A value added twice (even world size: both directions reach the far rank last), or one direction only."""
    if got is None or np.shape(got) != np.shape(total) or np.allclose(got, total):
        return ""
    far = (rank + world_size // 2) % world_size
    if world_size % 2 == 0 and np.allclose(got, total + inputs[far]):
        return f"rank {far} 的值加了两次：world_size 为偶数时，最后一步从左右两边来的是同一个 Rank 的值，只能加一次。"
    lefts = [sum(inputs[(rank - j) % world_size] for j in range(k + 1)) for k in range(world_size)]
    k = next((k for k in range(1, world_size) if np.allclose(got, lefts[k])), None)
    return f"只加了左边连续 {k + 1} 个 Rank（含自己）的值：另一个方向的消息也要收、也要加。" if k else ""


def check_ring_sum(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)``: the sum of every rank's x on a two-way ring, in ``world_size // 2`` steps."""
    world_sizes = tuple(world_sizes or WORLD_SIZES)
    what = "ring_sum 要在双向的环上传 world_size // 2 步，得到所有 Rank 的 x 之和"
    for world_size, inputs, results, calls in _rank_fn_runs(fn, what, world_sizes, timeout, longest=4):
        total = np.sum(inputs, axis=0)
        for rank, got in enumerate(results):
            hint = _ring_sum_hint(got, total, inputs, rank, world_size)
            core.compare(got, total, f"world_size = {world_size}，rank {rank}", hint)
        core.refuse_calls(calls, core.COLLECTIVE_CALLS, what, "这一题要用点对点的收发自己传，不能用集合通信。")
        steps = world_size // 2
        for rank, rank_calls in enumerate(calls if world_size > 2 else ()):
            for peer in ((rank + 1) % world_size, (rank - 1) % world_size):
                n = sum(1 for name, p, _ in rank_calls if name in core.SENDS and p == peer)
                if n > steps:
                    raise core.CheckFailed(
                        f"{what}：world_size = {world_size} 时 rank {rank} 给 rank {peer} 发了 {n} 条消息，"
                        f"双向的环只要 {steps} 步，每个方向每步一条。这是单向的环：两个方向同时传，步数减半。"
                    )
    core.passed(
        f"ring_sum 在 world_size = {', '.join(map(str, world_sizes))} 上用双向的环在 world_size // 2 步里得到了总和"
        "（偶数个 Rank 时对面那个 Rank 也只加了一次）。"
    )


try_exchange = core.fill_in_cell(check_exchange, EXCHANGE, "exchange", keep="exchange", lesson="04")
try_ring_pass = core.fill_in_cell(check_ring_pass, RING_PASS, "ring_pass")
