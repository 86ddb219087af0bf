"""The checkers of notebook 08 and ex08 reject the usual wrong answers, naming them, and accept right ones
written differently from the course's solution."""

import statistics

import pytest

from mgpu_helpers import checks
from mgpu_helpers.checks import stragglers as sc
from mgpu_helpers.checks.core import CheckFailed

# -- ring all-reduce cost (08's fill-in) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,message",
    [
        (lambda N, n, a, b: (n - 1) * a + (n - 1) / n * N * b, "只是一个阶段"),
        (lambda N, n, a, b: 2 * (n - 1) * a + 2 * (n - 1) * N * b, "nbytes / world_size 字节"),
        (lambda N, n, a, b: 2 * n * a + 2 * (n - 1) / n * N * b, "不是 world_size 步"),
        (lambda N, n, a, b: 2 * (n - 1) * a + 2 * N * b, "只在 n 很大时"),
    ],
    ids=["one phase", "whole buffer per step", "n steps", "2N beta"],
)
def test_a_wrong_ring_cost_is_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        sc.try_ring_allreduce_seconds(fn)


def test_a_ring_cost_summed_step_by_step_passes(capsys):
    def by_steps(nbytes, world_size, alpha, beta):
        t = 0.0
        for _phase in ("reduce-scatter", "all-gather"):
            for _step in range(world_size - 1):
                t += alpha + nbytes / world_size * beta
        return t

    assert sc.try_ring_allreduce_seconds(by_steps) is by_steps
    assert "通过：" in capsys.readouterr().out


def test_the_course_ring_cost_is_refused_under_any_name():
    import mgpu_helpers as mh
    from mgpu_helpers.lessons.cost_model import ring_allreduce_seconds as borrowed

    with pytest.raises(CheckFailed, match="课程自己的 .*ring_allreduce_seconds"):
        sc.try_ring_allreduce_seconds(lambda N, n, a, b: borrowed(N, n, a, b))
    with pytest.raises(CheckFailed, match="课程自己的 .*ring_allreduce_seconds"):
        sc.try_ring_allreduce_seconds(lambda N, n, a, b: mh.lessons.cost_model.ring_allreduce_seconds(N, n, a, b))


def test_the_stub_gives_the_course_version(capsys):
    from mgpu_helpers.lessons import cost_model

    assert sc.try_ring_allreduce_seconds(None) is cost_model.ring_allreduce_seconds
    assert "还没写" in capsys.readouterr().out


# -- the straggler from the time inside the collective (08's fill-in) ----------------------------------------


def _argmax_median(c):
    med = [statistics.median(x) for x in c]
    return max(range(len(med)), key=med.__getitem__)


def _argmin_first_step(c):
    return min(range(len(c)), key=lambda r: c[r][0])


def _argmin_sum(c):
    return min(range(len(c)), key=lambda r: sum(c[r]))


@pytest.mark.parametrize(
    "fn,message",
    [
        (_argmax_median, "待得最久"),
        (_argmin_first_step, "只看了第 0 步"),
        (_argmin_sum, "各步之和"),
        (lambda c: min(c, key=statistics.median), "应当返回一个 Rank 号"),
    ],
    ids=["longest collective", "first step only", "sum over steps", "returns the times"],
)
def test_a_wrong_straggler_reading_is_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        sc.try_straggler_from_collective(fn)


def test_a_straggler_found_by_sorting_medians_passes(capsys):
    def by_sorting(collective_s):
        meds = sorted((sorted(c)[len(c) // 2], r) for r, c in enumerate(collective_s))
        return meds[0][1]

    sc.try_straggler_from_collective(by_sorting)
    assert "通过：" in capsys.readouterr().out


def test_the_course_straggler_reader_is_refused():
    from mgpu_helpers.measure import straggler

    with pytest.raises(CheckFailed, match="课程自己的 .*straggler_by_collective"):
        sc.try_straggler_from_collective(lambda c: straggler.straggler_by_collective(c))


def test_every_case_has_one_shortest_median_at_the_straggler():
    for collective_s, strag, _ in sc.collective_cases():
        med = [statistics.median(c) for c in collective_s]
        assert min(range(len(med)), key=med.__getitem__) == strag
        assert sorted(med)[1] - sorted(med)[0] > 0.01  # no near tie


# -- ex08: the latency / bandwidth crossover ---------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,message",
    [
        (lambda n, a, b: a / b, "n 要乘回来"),
        (lambda n, a, b: 2 * (n - 1) * a / b, "约掉"),
        (lambda n, a, b: a / b / n, "n 放错了一边"),
        (lambda n, a, b: n * a / b / 1e9, "不是 GB"),
    ],
    ids=["one message", "2(n-1) kept", "n upside down", "in GB"],
)
def test_a_wrong_crossover_is_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        sc.check_allreduce_crossover_bytes(fn)


def test_a_crossover_solved_numerically_passes(capsys):
    def bisect(world_size, alpha, beta):
        lo, hi = 0.0, 1e15
        for _ in range(200):
            mid = (lo + hi) / 2
            if 2 * (world_size - 1) / world_size * mid * beta < 2 * (world_size - 1) * alpha:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    sc.check_allreduce_crossover_bytes(bisect)
    assert "通过：" in capsys.readouterr().out


def test_a_helper_that_borrows_the_course_reduce_scatter_is_refused():
    # As in notebook 08: the learner's all-reduce adds their own reduce-scatter and all-gather, and the
    # reduce-scatter was taken from the course under another name.
    from mgpu_helpers.lessons.cost_model import ring_reduce_scatter_seconds as course_rs

    ns = {"course_rs": course_rs}
    exec(
        "def rs(N, n, a, b):\n    return course_rs(N, n, a, b)\n"
        "def allreduce(N, n, a, b):\n    return 2 * rs(N, n, a, b)\n",
        ns,
    )
    with pytest.raises(CheckFailed, match="课程自己的 .*ring_reduce_scatter_seconds"):
        sc.try_ring_allreduce_seconds(ns["allreduce"])


# --------------------------------------------------------------------------------------------------------
# ex08's rebalance and its number-first wait.


def test_unchanged_shards_are_not_a_rebalance():
    with pytest.raises(checks.CheckFailed, match=r"rank 0 预计要 .*最好的整数分法 \[6, 6, 6, 6\]"):
        checks.check_rebalance(lambda shards, seconds: list(shards))


def test_no_wait_predicted_for_equal_shards_is_told_about_the_slow_rank():
    with pytest.raises(
        checks.CheckFailed, match=r"rank 0 每步等 [0-9.]+ s.*你的预测是 0\.000 s。Shard 一样大，时间却不一定一样"
    ):
        checks.check_wait_prediction(lambda: 0.0)


def test_the_slow_rank_s_whole_compute_as_the_wait_is_held_against_the_measured_wait():
    with pytest.raises(checks.CheckFailed, match=r"rank 0 每步等 [0-9.]+ s.*你的预测是 0\.360 s.*要等到谁算完"):
        checks.check_wait_prediction(lambda: 6 * 0.060)


def test_the_wait_behind_a_slow_rank_written_as_a_difference_passes(capsys):
    checks.check_wait_prediction(lambda: 6 * 0.060 - 6 * 0.020)
    assert "通过" in capsys.readouterr().out
