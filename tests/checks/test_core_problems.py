"""The rank-launching exercises as rows of a table (mgpu_helpers.checks.core.problems): the edge cases are in
every run a problem draws, not left to chance, so an answer that ignores them is rejected every time."""

import pytest
from learner_code import by_value, warm_ranks

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import collectives, p2p, semantics  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed, new_rng  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()


def test_every_broadcast_run_has_a_source_other_than_rank_0_and_a_zero():
    rng = new_rng()
    for _ in range(20):
        for world_size in (2, 3):
            inputs, (src,) = collectives._broadcast_case(rng, world_size)
            assert src != 0 and (inputs[src] == 0).any()


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


def test_every_point_to_point_run_has_zeros_in_the_data():
    rng = new_rng()
    for _ in range(20):
        for _world_size, _dtype, inputs in p2p._rank_fn_cases(rng, (2, 3, 4)):
            assert (inputs[0] == 0).any()


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
