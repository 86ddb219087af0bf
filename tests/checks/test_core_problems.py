"""The rank-launching exercises as rows of a table (mgpu_helpers.checks.core.problems): the edge cases are in
every run a problem draws, not left to chance, so an answer that ignores them is rejected every time."""

import pytest
from learner_code import by_value, warm_ranks

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import collectives, p2p, semantics  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()


def test_a_broadcast_that_takes_a_zero_for_nothing_received_is_rejected_every_time():
    zero_as_missing = by_value(
        """
        def answer(rank, world_size, x, src):
            import torch.distributed as dist
            if rank == src:
                for r in range(world_size):
                    if r != src:
                        dist.send(x, r)
            else:
                dist.recv(x, src)
            x[x == 0] = 1                      # a zero taken for "nothing received"
            return x""",
        "answer",
    )
    for _ in range(2):
        with pytest.raises(CheckFailed, match="应当是 0，实际是 1"):
            collectives.check_broadcast(zero_as_missing, world_sizes=(2, 3))


def test_a_broadcast_that_always_sends_from_rank_0_is_rejected_every_time():
    from_zero = by_value(
        """
        def answer(rank, world_size, x, src):
            import torch.distributed as dist
            if rank == 0:
                for r in range(1, world_size):
                    dist.send(x, r)
            else:
                dist.recv(x, 0)
            return x""",
        "answer",
    )
    with pytest.raises(CheckFailed, match=r"src = [12]，rank \d"):
        collectives.check_broadcast(from_zero, world_sizes=(2, 3))


def test_a_message_pass_that_takes_a_zero_for_nothing_received_is_rejected_every_time():
    zero_as_missing = by_value(
        """
        def answer(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            if rank % 2 == 0:
                dist.send(x, (rank + 1) % world_size)
                dist.recv(got, (rank - 1) % world_size)
            else:
                dist.recv(got, (rank - 1) % world_size)
                dist.send(x, (rank + 1) % world_size)
            got[got == 0] = 1                  # a zero taken for "nothing received"
            return got""",
        "answer",
    )
    for _ in range(2):
        with pytest.raises(CheckFailed, match="应当是 0，实际是 1"):
            p2p.check_pass_right(zero_as_missing, world_sizes=(2, 3))


def test_every_uneven_all_gather_run_has_an_empty_piece():
    refuses_empty = by_value(
        """
        def answer(rank, world_size, x):
            if x.numel() == 0:
                raise ValueError("empty piece")
            return x""",
        "answer",
    )
    with pytest.raises(CheckFailed, match=r"rank \d 出错了（ValueError）：.*empty piece"):
        semantics.check_all_gather_uneven(refuses_empty, world_sizes=(3,))
