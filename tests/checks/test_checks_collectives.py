"""The checkers of 05 and ex05 reject typical wrong answers, each by name, and accept a correct answer written
differently from the course's.

Ring checkers launch ranks: the wrong answers run on 3 ranks only (one launch each), where a whole-tensor
pass and a gather to rank 0 already send more than a ring does.
"""

import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from learner_code import by_value  # noqa: E402

from mgpu_helpers import checks  # noqa: E402
from mgpu_helpers.checks import collectives  # noqa: E402
from mgpu_helpers.checks.core import NOT_DONE, CheckFailed  # noqa: E402
from mgpu_helpers.models.collectives import expected_outputs  # noqa: E402

# --------------------------------------------------------------------------------------------------------
# 05: the ring all-reduce the learner writes, fn(tensor), to the right.

WHOLE_TENSOR_PASS = """
def whole(tensor):
    import torch, torch.distributed as dist
    n, r = dist.get_world_size(), dist.get_rank()
    token, total = tensor.clone(), tensor.clone()
    for _ in range(n - 1):                      # ex04's ring pass: the whole tensor, n - 1 times
        incoming = torch.empty_like(token)
        ops = [dist.P2POp(dist.isend, token, (r + 1) % n), dist.P2POp(dist.irecv, incoming, (r - 1) % n)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        total += incoming
        token = incoming
    tensor.copy_(total)
    return tensor
"""

GATHER_TO_ZERO = """
def gather_to_zero(tensor):
    import torch, torch.distributed as dist
    n, r = dist.get_world_size(), dist.get_rank()
    if r == 0:
        for src in range(1, n):
            got = torch.empty_like(tensor)
            dist.recv(got, src)
            tensor += got
        for dst in range(1, n):
            dist.send(tensor, dst)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)
    return tensor
"""

COURSE_UNDER_ANOTHER_NAME = """
def course(tensor):
    from mgpu_helpers.lessons.ring import ring_all_reduce as mine
    return mine(tensor)
"""

COLLECTIVE_VIA_C10D = """
def hidden(tensor):
    from torch.distributed import distributed_c10d as c
    c.all_reduce(tensor)
    return tensor
"""

ONLY_REDUCE_SCATTER = """
def half(tensor):
    import torch, torch.distributed as dist
    import mgpu_helpers as mh
    n, r = dist.get_world_size(), dist.get_rank()
    bounds = mh.lessons.ring.chunk_bounds(tensor.numel(), n)
    for s in range(n - 1):
        (a, b), (c, d) = bounds[(r - s) % n], bounds[(r - s - 1) % n]
        got = tensor.new_empty(d - c)
        for q in mh.lessons.p2p.exchange(tensor[a:b], (r + 1) % n, got, (r - 1) % n):
            q.wait()
        tensor[c:d] += got
    return tensor
"""

COLLECTIVE_IMPORTED_AT_THE_TOP = """
from torch.distributed import all_reduce as add_up_everywhere

def aliased(tensor):
    add_up_everywhere(tensor)
    return tensor
"""

# Correct, and unlike the course's: tensor_split, explicit chunk arithmetic, plain P2POp lists, and names
# imported at the top of the cell (they travel by reference, yet every send is still counted).
RIGHT_WRITTEN_OTHERWISE = """
import torch
import torch.distributed as dist
from torch.distributed import isend as send_async

def mine(tensor):
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor, n))
    buf = torch.empty_like(chunks[0])
    for s in range(2 * (n - 1)):
        out, inn = (r - s) % n, (r - s - 1) % n
        target = buf[:chunks[inn].numel()] if s < n - 1 else chunks[inn]
        ops = [dist.P2POp(op, t, peer) for op, t, peer in
               ((send_async, chunks[out], (r + 1) % n), (dist.irecv, target, (r - 1) % n)) if t.numel()]
        for q in (dist.batch_isend_irecv(ops) if ops else []):
            q.wait()
        if s < n - 1:
            chunks[inn] += target
    return tensor
"""


def test_whole_tensor_ring_pass_is_rejected_by_its_message_size():
    with pytest.raises(CheckFailed, match="正好是整个张量：那是练习 04 的整张量沿环传递"):
        collectives.check_ring_all_reduce_right(by_value(WHOLE_TENSOR_PASS, "whole"), world_sizes=(3,))


def test_gather_to_rank_zero_and_back_is_rejected_by_who_sends():
    with pytest.raises(CheckFailed, match="Gather \\+ Broadcast"):
        collectives.check_ring_all_reduce_right(by_value(GATHER_TO_ZERO, "gather_to_zero"), world_sizes=(3,))


def test_the_course_ring_under_another_name_is_refused():
    with pytest.raises(CheckFailed, match="课程自己的 mh.lessons.ring.ring_all_reduce"):
        collectives.check_ring_all_reduce_right(by_value(COURSE_UNDER_ANOTHER_NAME, "course"), world_sizes=(2,))
    with pytest.raises(CheckFailed, match="课程自己的实现"):
        collectives.check_ring_all_reduce_right(mh.lessons.ring.ring_all_reduce, world_sizes=(2,))


def test_a_collective_reached_through_distributed_c10d_is_refused():
    with pytest.raises(CheckFailed, match="不能直接调用 dist.all_reduce"):
        collectives.check_ring_all_reduce_right(by_value(COLLECTIVE_VIA_C10D, "hidden"), world_sizes=(2,))


def test_a_collective_imported_under_another_name_at_the_top_is_refused():
    with pytest.raises(CheckFailed, match="不能直接调用 dist.all_reduce"):
        collectives.check_ring_all_reduce_right(by_value(COLLECTIVE_IMPORTED_AT_THE_TOP, "aliased"), world_sizes=(2,))


def test_reduce_scatter_without_all_gather_is_told_what_is_missing():
    with pytest.raises(CheckFailed, match="All-Gather 阶段还要把完成的块传遍全环"):
        collectives.check_ring_all_reduce_right(by_value(ONLY_REDUCE_SCATTER, "half"), world_sizes=(3,))


def test_a_correct_ring_written_differently_passes(capsys):
    collectives.check_ring_all_reduce_right(by_value(RIGHT_WRITTEN_OTHERWISE, "mine"), world_sizes=(2, 3, 4))
    assert "通过" in capsys.readouterr().out


def test_the_unwritten_fill_in_falls_back_to_the_course_ring(capsys):
    stub = by_value('def stub(tensor):\n    raise NotImplementedError("练习：补全这里（约 9 行）")\n', "stub")
    assert collectives.try_ring_all_reduce(stub) is mh.lessons.ring.ring_all_reduce
    assert "还没写" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------------
# ex05-3: the ring turned round, fn(rank, world_size, x), to the left.

LEFT_BUT_GOING_RIGHT = """
def right(rank, world_size, x):
    import mgpu_helpers as mh
    return mh.lessons.ring.ring_all_reduce(x) if False else _ring(rank, world_size, x)

def _ring(rank, world_size, x):
    import torch.distributed as dist
    import mgpu_helpers as mh
    n = world_size
    b = mh.lessons.ring.chunk_bounds(x.numel(), n)
    for phase, step, who in mh.lessons.ring.ring_schedule(n):
        s, g = who[rank]
        got = x.new_empty(b[g][1] - b[g][0]) if phase == "reduce-scatter" else x[b[g][0]:b[g][1]]
        for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, x[b[s][0]:b[s][1]], (rank + 1) % n),
                                          dist.P2POp(dist.irecv, got, (rank - 1) % n)]):
            q.wait()
        if phase == "reduce-scatter":
            x[b[g][0]:b[g][1]] += got
    return x
"""

LEFT_WRITTEN_OTHERWISE = """
def left(rank, world_size, x):
    import torch, torch.distributed as dist
    n = world_size
    pieces = list(torch.tensor_split(x, n))
    for s in range(n - 1):
        out, inn = pieces[(rank + s) % n], pieces[(rank + s + 1) % n]
        tmp = torch.empty_like(inn)
        reqs = [dist.isend(out, (rank - 1) % n), dist.irecv(tmp, (rank + 1) % n)]
        for q in reqs:
            q.wait()
        inn.add_(tmp)
    for s in range(n - 1):
        out, inn = pieces[(rank - 1 + s) % n], pieces[(rank + s) % n]
        reqs = [dist.isend(out, (rank - 1) % n), dist.irecv(inn, (rank + 1) % n)]
        for q in reqs:
            q.wait()
    return x
"""


def test_the_right_ring_in_the_left_exercise_is_told_the_direction():
    with pytest.raises(CheckFailed, match="方向反了"):
        collectives.check_ring_all_reduce(by_value(LEFT_BUT_GOING_RIGHT, "right"), world_sizes=(3,))


def test_gather_to_zero_in_the_left_exercise_is_rejected():
    src = GATHER_TO_ZERO.replace("def gather_to_zero(tensor):", "def g(rank, world_size, tensor):")
    with pytest.raises(CheckFailed, match="Gather \\+ Broadcast"):
        collectives.check_ring_all_reduce(by_value(src, "g"), world_sizes=(3,))


def test_a_left_ring_written_differently_passes(capsys):
    collectives.check_ring_all_reduce(by_value(LEFT_WRITTEN_OTHERWISE, "left"), world_sizes=(2, 3, 4))
    assert "通过" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------------
# 05's small computations (no ranks).


def _expected(ar=None, ag=None, rs=None):
    ref = {n: (lambda inputs, n=n: expected_outputs(n, inputs)) for n in collectives.EXPECTED_NAMES}
    return {
        "all_reduce": ar or ref["all_reduce"],
        "all_gather": ag or ref["all_gather"],
        "reduce_scatter": rs or ref["reduce_scatter"],
    }


@pytest.mark.parametrize("fns", [{}, {"allreduce": lambda inputs: inputs}], ids=["empty", "misspelt name"])
def test_expected_outputs_without_a_known_name_says_so_rather_than_passing(fns, capsys):
    with pytest.raises(ValueError, match="all_reduce"):
        collectives.check_expected_outputs(fns)
    assert "通过" not in capsys.readouterr().out


def test_expected_outputs_wrong_answers_are_named():
    import numpy as np

    mean = lambda inputs: [np.mean(inputs, axis=0).tolist()] * len(inputs)
    with pytest.raises(CheckFailed, match="这是平均值"):
        collectives.check_expected_outputs(_expected(ar=mean))
    row_sums = lambda inputs: [np.sum(inputs, axis=1).tolist()] * len(inputs)
    with pytest.raises(CheckFailed, match="按列"):
        collectives.check_expected_outputs(_expected(ar=row_sums))
    reversed_order = lambda inputs: [np.concatenate(inputs[::-1]).tolist()] * len(inputs)
    with pytest.raises(CheckFailed, match="顺序反了"):
        collectives.check_expected_outputs(_expected(ag=reversed_order))
    whole_sum = lambda inputs: [np.sum(inputs, axis=0).tolist()] * len(inputs)
    with pytest.raises(CheckFailed, match="完整的和"):
        collectives.check_expected_outputs(_expected(rs=whole_sum))
    own_piece = lambda inputs: [np.split(np.asarray(r), len(inputs))[k].tolist() for k, r in enumerate(inputs)]
    with pytest.raises(CheckFailed, match="没有求和"):
        collectives.check_expected_outputs(_expected(rs=own_piece))


def test_expected_outputs_written_differently_pass(capsys):
    def ar(inputs):
        total = [sum(col) for col in zip(*inputs)]
        return [list(total) for _ in inputs]

    def ag(inputs):
        return [[v for row in inputs for v in row] for _ in inputs]

    def rs(inputs):
        n, total = len(inputs), [sum(col) for col in zip(*inputs)]
        k = len(total) // n
        return [total[r * k : (r + 1) * k] for r in range(n)]

    collectives.check_expected_outputs({"all_reduce": ar, "all_gather": ag, "reduce_scatter": rs})
    assert "通过" in capsys.readouterr().out
    fns = collectives.try_expected_outputs(None, ag, rs)  # one still unwritten: the course's three
    assert fns["all_reduce"]([[1, 2], [3, 4]]) == [[4.0, 6.0], [4.0, 6.0]]


def test_each_expected_output_goes_through_the_fill_in_protocol(monkeypatch, capsys):
    """Written ones are checked even while another is unwritten; under grading an unwritten one fails."""
    ref = {n: (lambda inputs, n=n: expected_outputs(n, inputs)) for n in collectives.EXPECTED_NAMES}
    mean = lambda inputs: [[sum(col) / len(inputs) for col in zip(*inputs)]] * len(inputs)
    with pytest.raises(CheckFailed, match="这是平均值"):
        collectives.try_expected_outputs(mean, None, ref["reduce_scatter"])
    fns = collectives.try_expected_outputs(None, ref["all_gather"], None)
    out = capsys.readouterr().out
    assert "「expected_all_reduce」还没写" in out and "通过：expected_all_gather" in out
    assert fns["all_gather"] is ref["all_gather"] and fns["all_reduce"]([[1], [2]]) == [[3.0], [3.0]]
    monkeypatch.setenv("MGPU_GRADING", "1")
    with pytest.raises(CheckFailed, match=NOT_DONE):
        collectives.try_expected_outputs(None, ref["all_gather"], ref["reduce_scatter"])


def test_busbw_wrong_answers_are_named():
    with pytest.raises(CheckFailed, match="这是 algbw"):
        collectives.check_all_reduce_busbw(lambda s, t, n: s / t)
    with pytest.raises(CheckFailed, match="只数了一个阶段"):
        collectives.check_all_reduce_busbw(lambda s, t, n: s / t * (n - 1) / n)
    with pytest.raises(CheckFailed, match="每一步只发 S/n 的一块"):
        collectives.check_all_reduce_busbw(lambda s, t, n: s / t * 2 * (n - 1))
    with pytest.raises(CheckFailed, match="写死成了 4 个 Rank"):
        collectives.check_all_reduce_busbw(lambda s, t, n: s / t * 1.5)
    with pytest.raises(CheckFailed, match="极限"):
        collectives.check_all_reduce_busbw(lambda s, t, n: 2 * s / t)
    with pytest.raises(CheckFailed, match="不是 GB/s"):
        collectives.check_all_reduce_busbw(lambda s, t, n: s / t * 2 * (n - 1) / n / 1e9)


def test_busbw_written_differently_passes(capsys):
    collectives.check_all_reduce_busbw(lambda nbytes, seconds, n: 2 * nbytes * (1 - 1 / n) / seconds)
    assert "通过" in capsys.readouterr().out


def test_a_passing_busbw_is_kept_for_later_lessons(tmp_path, monkeypatch, capsys):
    """05 keeps the learner's all_reduce_busbw (keep=), so that 11 and 12 can reuse it with mh.mine."""
    monkeypatch.setenv("MGPU_OWN_CODE_DIR", str(tmp_path))
    assert collectives.try_all_reduce_busbw(busbw_by_steps) is busbw_by_steps
    loaded = mh.mine("all_reduce_busbw", fallback=None, lesson="05")
    assert loaded is not None and loaded(1e9, 1.0, 4) == pytest.approx(1.5e9)
    assert "用的是你在 05 写的" in capsys.readouterr().out


def busbw_by_steps(nbytes, seconds, world_size):
    """Correct, counted as the ring's steps: 2(n - 1) chunks of nbytes / n."""
    return 2 * (world_size - 1) * (nbytes / world_size) / seconds


def test_speedup_wrong_answers_are_named():
    with pytest.raises(CheckFailed, match="倒过来了"):
        collectives.check_comm_share_speedup(lambda b, a: (1 - b) / (1 - a))
    with pytest.raises(CheckFailed, match="占比之比"):
        collectives.check_comm_share_speedup(lambda b, a: b / a if a else 1.0)
    with pytest.raises(CheckFailed, match="占比相减"):
        collectives.check_comm_share_speedup(lambda b, a: 1 + b - a)


def test_speedup_written_differently_passes(capsys):
    def speedup(before, after, compute=1.0):
        return (compute / (1 - before)) / (compute / (1 - after))

    collectives.check_comm_share_speedup(speedup)
    assert "通过" in capsys.readouterr().out


def test_a_ring_that_never_ends_is_reported_with_where_the_ranks_wait():
    only_sends = by_value(
        """
        def only_sends(tensor):
            import torch.distributed as dist
            r, n = dist.get_rank(), dist.get_world_size()
            dist.recv(tensor.clone(), (r - 1) % n)      # every rank waits for a message nobody sends first
            return tensor
        """,
        "only_sends",
    )
    with pytest.raises(CheckFailed, match="还没有结束.*rank 0 卡在"):
        collectives.check_ring_all_reduce_right(only_sends, world_sizes=(2,), timeout=5)


def _first_out_of_step_zipped(calls):
    """Wrong: zip stops at the shortest rank, so a missing call is never seen."""
    for k, row in enumerate(zip(*calls)):
        if len({tuple(c) for c in row}) > 1:
            return k
    return None


def test_first_out_of_step_wrong_answers_are_named():
    ref = collectives.reference_first_out_of_step
    with pytest.raises(CheckFailed, match="只比了名字"):
        collectives.check_first_out_of_step(lambda calls: ref([[(n, 0) for n, _c in rank] for rank in calls]))
    with pytest.raises(CheckFailed, match="zip"):
        collectives.check_first_out_of_step(_first_out_of_step_zipped)
    with pytest.raises(CheckFailed, match="从 0 数起"):
        collectives.check_first_out_of_step(lambda calls: None if ref(calls) is None else ref(calls) + 1)
    with pytest.raises(CheckFailed, match="不只是前两个"):
        collectives.check_first_out_of_step(lambda calls: ref(calls[:2]))


def test_first_out_of_step_written_differently_passes(capsys):
    def first_out_of_step(calls):
        k = 0
        while any(k < len(c) for c in calls):
            fingerprints = [tuple(c[k]) if k < len(c) else "missing" for c in calls]
            if fingerprints.count(fingerprints[0]) != len(fingerprints):
                return k
            k += 1
        return None

    collectives.check_first_out_of_step(first_out_of_step)
    assert "通过" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------------
# ex05's exercises: the usual wrong answers named.


def test_all_gather_in_arrival_order_names_the_misplaced_piece():
    wrong = by_value(
        """
        def arrival_order(rank, world_size, x):
            import torch, torch.distributed as dist
            parts, token = [x.clone()], x.clone()
            for _ in range(world_size - 1):
                incoming = torch.empty_like(x)
                ops = [dist.P2POp(dist.isend, token, (rank + 1) % world_size),
                       dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
                parts.append(incoming)
                token = incoming
            return torch.cat(parts)
        """,
        "arrival_order",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank \d+：结果里第 \d+ 段.*应当是 rank \d+ 的数据.*按 rank 顺序放"):
        checks.check_all_gather(wrong, world_sizes=(3,))


def test_calling_the_collective_itself_is_refused_in_a_point_to_point_exercise():
    cheat = by_value(
        """
        def cheat(rank, world_size, x):
            import torch.distributed as dist
            dist.all_reduce(x)
            return x
        """,
        "cheat",
    )
    with pytest.raises(checks.CheckFailed, match="不能直接调用 dist.all_reduce"):
        checks.check_ring_all_reduce(cheat, world_sizes=(2,))


def test_counting_received_bytes_too_is_reported_as_twice_the_count():
    both = by_value(
        """
        def both(rank, world_size, x):
            import torch.distributed as dist
            import mgpu_helpers as mh
            seen = 0
            original = dist.batch_isend_irecv
            def counting(ops):
                nonlocal seen
                seen += sum(op.tensor.numel() * op.tensor.element_size() for op in ops)
                return original(ops)
            dist.batch_isend_irecv = counting
            try:
                mh.lessons.ring.ring_all_reduce(x)
            finally:
                dist.batch_isend_irecv = original
            return seen
        """,
        "both",
    )
    with pytest.raises(checks.CheckFailed, match=r"world_size = 2，\d+ 个 float32.*rank 0.*两倍：把收到的.*也算进去了"):
        checks.check_count_sent_bytes(both, world_sizes=(2,))


def test_guessing_half_the_bytes_is_told_about_the_second_phase():
    with pytest.raises(checks.CheckFailed, match=r"你的答案 3000000.*6000000 字节.*All-Gather 阶段也要发"):
        checks.check_ring_bytes_guess(lambda: 3_000_000)
