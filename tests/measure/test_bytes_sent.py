"""Bytes each rank sends, counted as the ranks run the collectives from point-to-point messages (notebook 07)."""

import pytest

import mgpu_helpers as mh
from mgpu_helpers.models.bandwidth import bytes_sent_per_rank
from mgpu_helpers.runs import bytes_sent


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_counted_bytes_match_the_formulas_and_the_root_of_a_reduce_sends_nothing(world_size):
    nbytes = 4 * world_size * 10
    res = mh.run_ranks(
        bytes_sent.count_bytes_sent, world_size, args=(nbytes,), backend="gloo", stream=False, quiet=True
    )
    for rank, sent in enumerate(res.values):
        assert set(sent) == set(bytes_sent.OPS)
        for op, counted in sent.items():
            want = 0 if op == "reduce" and rank == 0 else bytes_sent_per_rank(op, nbytes, world_size)
            assert counted == want, (op, rank)
    assert res.values[0]["reduce"] == 0
    if world_size > 1:
        n = world_size
        assert res.values[1]["reduce"] == nbytes
        assert res.values[1]["all_gather"] == (n - 1) * nbytes // n
        assert res.values[1]["all_reduce"] == 2 * res.values[1]["reduce_scatter"]


def test_a_buffer_that_does_not_split_evenly_is_refused_with_the_size_to_use():
    with pytest.raises(mh.RankError, match="multiple of 4 \\* world_size = 12"):
        mh.run_ranks(bytes_sent.count_bytes_sent, 3, args=(20,), backend="gloo", stream=False, quiet=True)


def test_the_count_goes_through_the_lessons_ring_and_leaves_it_as_it_was():
    from mgpu_helpers.lessons import p2p

    before = p2p.exchange
    res = mh.run_ranks(
        bytes_sent.count_bytes_sent, 2, args=(16, ("all_gather",)), backend="gloo", stream=False, quiet=True
    )
    assert res.values == [{"all_gather": 8}, {"all_gather": 8}] and p2p.exchange is before
