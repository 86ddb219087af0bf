"""Bytes each rank sends, counted as the ranks run the collectives from point-to-point messages (notebook 07)."""
import pytest

import mgpu_helpers as mh
from mgpu_helpers.measure import bytes_sent


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_counted_bytes_match_the_formulas_and_the_root_of_a_reduce_sends_nothing(world_size):
    nbytes = 4 * world_size * 10
    res = mh.run_ranks(bytes_sent.count_bytes_sent, world_size, args=(nbytes,), backend="gloo",
                       stream=False, quiet=True)
    for rank, sent in enumerate(res.values):
        assert set(sent) == set(bytes_sent.OPS)
        for op, counted in sent.items():
            assert counted == bytes_sent.formula_bytes_sent(op, nbytes, world_size, rank), (op, rank)
    assert res.values[0]["reduce"] == 0
    if world_size > 1:
        n = world_size
        assert res.values[1]["reduce"] == nbytes
        assert res.values[1]["all_gather"] == (n - 1) * nbytes // n
        assert res.values[1]["all_reduce"] == 2 * res.values[1]["reduce_scatter"]


def test_a_buffer_that_does_not_split_evenly_is_refused_with_the_size_to_use():
    with pytest.raises(mh.RankError, match="multiple of 4 \\* world_size = 12"):
        mh.run_ranks(bytes_sent.count_bytes_sent, 3, args=(20,), backend="gloo", stream=False, quiet=True)


def test_formula_for_the_reduce_root_is_zero_and_the_bandwidth_model_elsewhere():
    assert bytes_sent.formula_bytes_sent("reduce", 100, 4, 0) == 0.0
    assert bytes_sent.formula_bytes_sent("reduce", 100, 4, 3) == 100
    assert bytes_sent.formula_bytes_sent("all_reduce", 100, 4, 0) == 150
