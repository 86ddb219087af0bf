"""Notebook 04's fill-ins (exchange, ring_pass) and ex04's checkers: typical wrong answers are named, a correct
answer written another way passes, and the rules (blocking only, no collective, no course code) are checked
against the calls the ranks really made."""

import re
import textwrap

import numpy as np
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from learner_code import PARITY_EXCHANGE, by_value, warm_ranks  # noqa: E402

from mgpu_helpers import checks  # noqa: E402
from mgpu_helpers.checks import p2p  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()  # the rank server up before the deadlock tests start their clocks


# -- exchange -------------------------------------------------------------------------------------------------


def test_exchange_by_rank_parity_with_blocking_calls_passes(capsys):
    parity = by_value(PARITY_EXCHANGE, "exchange")
    p2p.check_exchange(parity)
    assert capsys.readouterr().out.startswith("通过：")


def test_exchange_that_sends_first_everywhere_is_a_deadlock_naming_the_rank_and_call():
    send_first = by_value(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            import torch.distributed as dist
            dist.send(send_buf, dst)
            dist.recv(recv_buf, src)
            return []
        """,
        "exchange",
    )
    with pytest.raises(CheckFailed, match=r"死锁.*rank 0 卡在 dist\.send（exchange 的第 \d+ 行）"):
        p2p.check_exchange(send_first, world_sizes=(3,), timeout=15)


def test_exchange_that_sends_empty_buffers_is_told_to_skip_them():
    posts_empty = by_value(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            import torch.distributed as dist
            return dist.batch_isend_irecv([dist.P2POp(dist.isend, send_buf, dst), dist.P2POp(dist.irecv, recv_buf, src)])
        """,
        "exchange",
    )
    with pytest.raises(CheckFailed, match="空张量.*长度为 0 的缓冲区要跳过") as info:
        p2p.check_exchange(posts_empty, world_sizes=(2,))
    assert "batch_isend_irecv 里的" in str(info.value) and "batch:" not in str(info.value)  # no internal label


def test_exchange_that_forgets_to_return_the_requests_is_told_what_to_return():
    no_return = by_value(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            import torch.distributed as dist
            ops = [dist.P2POp(dist.isend, send_buf, dst)] if send_buf.numel() else []
            ops += [dist.P2POp(dist.irecv, recv_buf, src)] if recv_buf.numel() else []
            for req in (dist.batch_isend_irecv(ops) if ops else []):
                req.wait()
        """,
        "exchange",
    )
    with pytest.raises(CheckFailed, match="返回的是 NoneType，应当是一个请求的列表"):
        p2p.check_exchange(no_return, world_sizes=(2,))


def test_exchange_with_dst_and_src_swapped_is_rejected_on_three_ranks():
    swapped = by_value(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            import torch.distributed as dist
            ops = [dist.P2POp(dist.isend, send_buf, src)] if send_buf.numel() else []
            ops += [dist.P2POp(dist.irecv, recv_buf, dst)] if recv_buf.numel() else []
            return dist.batch_isend_irecv(ops) if ops else []
        """,
        "exchange",
    )
    # the lengths no longer match the sends: gloo waits for bytes that never come (or refuses them)
    with pytest.raises(CheckFailed, match=r"卡在 request\.wait\(\)|收到的是 rank \d|rank \d 出错了"):
        p2p.check_exchange(swapped, world_sizes=(3,), timeout=15)


def test_exchange_that_calls_the_course_implementation_does_not_count():
    borrowed = by_value(
        """
        from mgpu_helpers.lessons.p2p import exchange as course_exchange
        def exchange(send_buf, dst, recv_buf, src, group=None):
            return course_exchange(send_buf, dst, recv_buf, src, group)
        """,
        "exchange",
    )
    with pytest.raises(CheckFailed, match="课程自己的 mh.lessons.p2p.exchange"):
        p2p.check_exchange(borrowed, world_sizes=(2,))


def test_try_exchange_gives_the_course_version_while_the_stub_is_unwritten(capsys):
    stub = by_value(
        """
        def exchange(send_buf, dst, recv_buf, src, group=None):
            raise NotImplementedError("练习：补全这里（约 7 行）")
        """,
        "exchange",
    )
    assert p2p.try_exchange(stub) is mh.lessons.p2p.exchange
    assert "还没写" in capsys.readouterr().out


# -- ring_pass ------------------------------------------------------------------------------------------------

RING_HEAD = """
    from mgpu_helpers.lessons.p2p import exchange
    def ring_pass(token, steps=None):
        import torch, torch.distributed as dist
        rank, world_size = dist.get_rank(), dist.get_world_size()
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        steps = world_size - 1 if steps is None else steps
"""


def _ring(body: str):
    return by_value(RING_HEAD + textwrap.indent(textwrap.dedent(body), " " * 8), "ring_pass")


def test_ring_pass_written_as_a_while_loop_passes(capsys):
    p2p.check_ring_pass(
        _ring("""
        arrived = []
        while len(arrived) < steps:
            incoming = torch.empty_like(token)
            for request in exchange(arrived[-1] if arrived else token, right, incoming, left):
                request.wait()
            arrived.append(incoming)
        return arrived
        """)
    )
    assert capsys.readouterr().out.startswith("通过：")


def test_ring_pass_that_sends_its_own_token_every_step_is_told_to_forward():
    with pytest.raises(CheckFailed, match="它每一步都在发自己的 token"):
        p2p.check_ring_pass(
            _ring("""
            arrived = []
            for _ in range(steps):
                incoming = torch.empty_like(token)
                for request in exchange(token, right, incoming, left):
                    request.wait()
                arrived.append(incoming)
            return arrived
            """),
            world_sizes=(3,),
        )


def test_ring_pass_that_goes_world_size_steps_is_told_the_count():
    with pytest.raises(CheckFailed, match=r"列表里有 3 个张量，应当是 2 个.*自己的 token 不用再收回来"):
        p2p.check_ring_pass(
            _ring("""
            arrived, current = [], token
            for _ in range(world_size if steps == world_size - 1 else steps):
                incoming = torch.empty_like(token)
                for request in exchange(current, right, incoming, left):
                    request.wait()
                arrived.append(incoming)
                current = incoming
            return arrived
            """),
            world_sizes=(3,),
        )


def test_ring_pass_with_one_shared_receive_buffer_names_the_step():
    with pytest.raises(CheckFailed, match=r"第 1 步应当收到 rank \d 的 token"):
        p2p.check_ring_pass(
            _ring("""
            arrived, incoming, current = [], torch.empty_like(token), token.clone()
            for _ in range(steps):
                for request in exchange(current, right, incoming, left):
                    request.wait()
                arrived.append(incoming)
                current = incoming.clone()
            return arrived
            """),
            world_sizes=(3,),
        )


def test_ring_pass_that_calls_the_course_ring_pass_does_not_count():
    with pytest.raises(CheckFailed, match="课程自己的 mh.lessons.p2p.ring_pass"):
        p2p.check_ring_pass(
            _ring("""
            import mgpu_helpers as mh
            return mh.lessons.p2p.ring_pass(token, steps)
            """),
            world_sizes=(2,),
        )


# -- ex04: pass_right, blocking only ----------------------------------------------------------------------------


def test_pass_right_with_rank_zero_receiving_first_passes(capsys):
    zero_first = by_value(
        """
        def pass_right(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            if rank == 0:
                dist.recv(got, (rank - 1) % world_size)
                dist.send(x, (rank + 1) % world_size)
            else:
                dist.send(x, (rank + 1) % world_size)
                dist.recv(got, (rank - 1) % world_size)
            return got
        """,
        "pass_right",
    )
    p2p.check_pass_right(zero_first, world_sizes=(2, 3))
    assert capsys.readouterr().out.startswith("通过：")


@pytest.mark.parametrize(
    "name,source,why",
    [
        (
            "batched",
            """
        def pass_right(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, x, (rank + 1) % world_size), dist.P2POp(dist.irecv, got, (rank - 1) % world_size)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            return got
        """,
            "调用了 dist.batch_isend_irecv。这一题只许用阻塞的",
        ),
        (
            "isend under another name",
            """
        from torch.distributed import isend as post, recv
        def pass_right(rank, world_size, x):
            import torch
            got = torch.empty_like(x)
            req = post(x, (rank + 1) % world_size)
            recv(got, (rank - 1) % world_size)
            req.wait()
            return got
        """,
            "调用了 dist.isend。这一题只许用阻塞的",
        ),
        (
            "all_gather",
            """
        def pass_right(rank, world_size, x):
            import torch, torch.distributed as dist
            parts = [torch.empty_like(x) for _ in range(world_size)]
            dist.all_gather(parts, x)
            return parts[(rank - 1) % world_size]
        """,
            "调用了 dist.all_gather。这一题要用点对点",
        ),
        (
            "course code",
            """
        def pass_right(rank, world_size, x):
            import torch
            import mgpu_helpers as mh
            got = torch.empty_like(x)
            for req in mh.lessons.p2p.exchange(x, (rank + 1) % world_size, got, (rank - 1) % world_size):
                req.wait()
            return got
        """,
            "课程自己的 mh.lessons.p2p.exchange",
        ),
    ],
)
def test_pass_right_refuses_what_the_exercise_rules_out(name, source, why):
    with pytest.raises(CheckFailed, match=why):
        p2p.check_pass_right(by_value(source, "pass_right"), world_sizes=(3,))


# -- ex04: ring_sum on a two-way ring ---------------------------------------------------------------------------


def test_two_way_ring_sum_with_two_batches_per_step_passes(capsys):
    two_batches = by_value(
        """
        def ring_sum(rank, world_size, x):
            import torch, torch.distributed as dist
            right, left = (rank + 1) % world_size, (rank - 1) % world_size
            total, a, b = x.clone(), x.clone(), x.clone()
            for step in range(world_size // 2):
                na, nb = torch.empty_like(x), torch.empty_like(x)
                for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, a, right), dist.P2POp(dist.irecv, na, left)]):
                    req.wait()
                for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, b, left), dist.P2POp(dist.irecv, nb, right)]):
                    req.wait()
                last_and_same = world_size % 2 == 0 and step == world_size // 2 - 1
                total = total + na + (0 * nb if last_and_same else nb)
                a, b = na, nb
            return total
        """,
        "ring_sum",
    )
    p2p.check_ring_sum(two_batches, world_sizes=(2, 3, 4))
    assert capsys.readouterr().out.startswith("通过：")


ONE_WAY = """
    def ring_sum(rank, world_size, x):
        import torch, torch.distributed as dist
        total, token = x.clone(), x.clone()
        for _ in range(world_size - 1):
            incoming = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, token, (rank + 1) % world_size), dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            total += incoming
            token = incoming
        return total
"""

DOUBLE_COUNT = """
    def ring_sum(rank, world_size, x):
        import torch, torch.distributed as dist
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        total, a, b = x.clone(), x.clone(), x.clone()
        for _ in range(world_size // 2):
            na, nb = torch.empty_like(x), torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, a, right), dist.P2POp(dist.irecv, na, left),
                   dist.P2POp(dist.isend, b, left), dist.P2POp(dist.irecv, nb, right)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            total += na + nb
            a, b = na, nb
        return total
"""

COLLECTIVE = """
    def ring_sum(rank, world_size, x):
        import torch.distributed as dist
        dist.all_reduce(x)
        return x
"""


@pytest.mark.parametrize(
    "source,world_sizes,why",
    [
        (ONE_WAY, (3,), "这是单向的环"),
        (DOUBLE_COUNT, (4,), r"rank \d 的值加了两次"),
        (COLLECTIVE, (3,), "调用了 dist.all_reduce。这一题要用点对点"),
    ],
    ids=["one-way ring", "opposite rank counted twice", "all_reduce"],
)
def test_ring_sum_names_the_typical_mistakes(source, world_sizes, why):
    with pytest.raises(CheckFailed, match=why):
        p2p.check_ring_sum(by_value(source, "ring_sum"), world_sizes=world_sizes)


def test_every_rank_sends_in_the_first_round_of_each_direction():
    """Where a deadlock can happen: a round in which no rank is empty, in both directions, every run."""
    rng = np.random.default_rng()
    for world_size in (2, 3, 4):
        rounds = p2p._exchange_rounds(rng, world_size)
        full = {direction for direction, _dtype, lengths, _data in rounds if all(lengths)}
        empty = [lengths.count(0) for _direction, _dtype, lengths, _data in rounds]
        assert full == {"right", "left"} and 0 in empty and 1 in empty


# --------------------------------------------------------------------------------------------------------
# ex04's pass_right: the wrong direction and a deadlock named.


def test_wrong_direction_in_the_ring_names_the_rank_and_whose_data_arrived():
    wrong = by_value(
        """
        def pass_left(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            ops = [dist.P2POp(dist.isend, x, (rank - 1) % world_size),
                   dist.P2POp(dist.irecv, got, (rank + 1) % world_size)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            return got
        """,
        "pass_left",
    )
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_pass_right(wrong, world_sizes=(3,))
    msg = str(info.value)
    assert re.search(r"world_size = 3，rank 0 应当收到左边 rank 2 的数据：第 \d+ 个元素应当是", msg), msg
    assert "那正是 rank 1 的输入" in msg


def test_send_first_on_every_rank_is_reported_as_a_deadlock():
    wrong = by_value(
        """
        def send_first(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            dist.send(x, (rank + 1) % world_size)
            dist.recv(got, (rank - 1) % world_size)
            return got
        """,
        "send_first",
    )
    with pytest.raises(checks.CheckFailed, match=r"死锁.*rank 0 卡在 dist.send"):
        checks.check_pass_right(wrong, world_sizes=(2,), timeout=4)
