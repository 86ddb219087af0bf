"""Notebook 04's ring pass and exchange (generated into mh.lessons.p2p), and the bytes a ring all-reduce sends."""

import numpy as np
import pytest

import mgpu_helpers as mh
from mgpu_helpers.checks import collectives as coll_checks
from mgpu_helpers.checks.core import CheckFailed, RankProblem, launch_check, run_problem
from mgpu_helpers.models import bandwidth


def _ring_pass_rank(rank, world_size, steps):
    import torch

    from mgpu_helpers.lessons.p2p import exchange, ring_pass

    arrived = [int(t.item()) for t in ring_pass(torch.tensor([rank]), steps)]
    nothing = exchange(torch.empty(0), (rank + 1) % world_size, torch.empty(0), (rank - 1) % world_size)
    return arrived, len(nothing)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_ring_pass_hands_each_token_to_the_right(world_size):
    res = mh.run_ranks(_ring_pass_rank, world_size, args=(None,), backend="gloo", stream=False, quiet=True)
    for rank, (arrived, posted) in enumerate(res.values):
        assert arrived == [(rank - k) % world_size for k in range(1, world_size)]
        assert posted == 0, "empty buffers must not be sent"


def test_ring_pass_can_go_round_more_than_once():
    res = mh.run_ranks(_ring_pass_rank, 3, args=(4,), backend="gloo", stream=False, quiet=True)
    assert res.values[0][0] == [2, 1, 0, 2]


@pytest.mark.parametrize("length,world_size", [(10, 3), (12, 4), (2, 4), (1001, 2)])
def test_counted_bytes_follow_the_schedule_and_the_formula(length, world_size):
    expected = coll_checks.ring_bytes_per_rank(length, world_size)
    inputs = [np.zeros(length, np.float32)] * world_size
    counted = launch_check(coll_checks.reference_count_sent_bytes, "count", world_size, inputs)
    assert counted == expected  # counted on running ranks == the schedule's chunk sizes
    if length % world_size == 0:
        assert expected == [bandwidth.bytes_sent_per_rank("all_reduce", 4 * length, world_size)] * world_size
    assert sum(expected) == 2 * (world_size - 1) * 4 * length  # every chunk makes n - 1 hops, in each phase


def test_number_first_guess_is_held_against_the_count(capsys):
    right = 2 * 3 / 4 * 4 * coll_checks.GUESS_ELEMENTS
    coll_checks.check_ring_bytes_guess(lambda: right)
    assert capsys.readouterr().out.startswith("通过：")
    with pytest.raises(CheckFailed, match="张量的大小 S"):
        coll_checks.check_ring_bytes_guess(lambda: 4 * coll_checks.GUESS_ELEMENTS)
    with pytest.raises(CheckFailed, match="要返回一个数"):
        coll_checks.check_ring_bytes_guess(lambda: "a lot")


def _echo(rank, world_size, x, k):
    return x * k


def test_rank_problem_runner_compares_every_rank_and_names_the_case():
    problem = RankProblem(
        name="echo",
        what="echo 要返回 x 乘以 k",
        make_case=lambda rng, world_size: ([np.full(2, float(r), np.float32) for r in range(world_size)], (3,)),
        reference=lambda inputs, extra, world_size: [inp * extra[0] for inp in inputs],
        done="echo 在 world_size = {sizes} 上都对。",
    )
    cases = run_problem(problem, _echo, world_sizes=(2,))
    assert cases[0].expected[1].tolist() == [3.0, 3.0]
    wrong = RankProblem(**{**problem.__dict__, "reference": lambda inputs, extra, world_size: list(inputs)})
    with pytest.raises(CheckFailed, match=r"world_size = 2，rank 1：第 0 个元素应当是 1，实际是 3"):
        run_problem(wrong, _echo, world_sizes=(2,))
    with pytest.raises(ValueError, match="world_sizes"):
        run_problem(problem, _echo, world_sizes=(0,))
