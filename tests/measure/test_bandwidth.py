import pytest

from mgpu_helpers.models import bandwidth


def test_busbw_matches_nccl_tests_reference_row():
    # nccl-tests all_reduce_perf, 2 x H200, 1 GiB out-of-place: 3281.55 us -> algbw 327.21, busbw 327.21 GB/s
    nbytes, seconds = 1073741824, 3281.55e-6
    assert bandwidth.algbw(nbytes, seconds) / 1e9 == pytest.approx(327.21, abs=0.01)
    assert bandwidth.busbw("all_reduce", nbytes, seconds, 2) / 1e9 == pytest.approx(327.21, abs=0.01)
    # all_gather 1 GiB, 1983.22 us -> algbw 541.41, busbw 270.71 GB/s
    assert bandwidth.busbw("all_gather", nbytes, 1983.22e-6, 2) / 1e9 == pytest.approx(270.71, abs=0.01)


def test_busbw_factor_grows_with_world_size():
    assert bandwidth.busbw("all_reduce", 8, 1, 8) == pytest.approx(8 * 2 * 7 / 8)
    assert bandwidth.busbw("reduce_scatter", 8, 1, 4) == pytest.approx(6)


def test_busbw_rejects_unknown_op_and_bad_time():
    with pytest.raises(ValueError, match="unknown collective"):
        bandwidth.busbw("allreduce", 1, 1, 2)
    with pytest.raises(ValueError, match="positive"):
        bandwidth.algbw(1, 0)
