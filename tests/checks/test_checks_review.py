"""ex11 and 11's part 3 (mgpu_helpers.checks.review): the usual wrong answers are named, right ones written
differently pass; ex11's checkers run ranks of the deterministic (sleep) straggler step, 11's are held against a
recorded-shape run."""

import statistics

import pytest

from mgpu_helpers import checks
from mgpu_helpers.checks import review
from mgpu_helpers.checks.core import CheckFailed

# --------------------------------------------------------------------------------------------------------
# ex11: the speed-up predicted, then measured; the straggler and its cost from per-rank records.


def test_four_ranks_predicted_four_times_faster_is_held_against_the_uneven_run():
    with pytest.raises(
        checks.CheckFailed, match=r"Shard 12/6/4/2.*量到加速比 [0-9.]+×.*你的预测是 4\.00×。4 个 Rank 不会自动快 4 倍"
    ):
        checks.check_speedup_prediction(lambda: (4.0, 4.0))


@pytest.mark.parametrize(
    "guess, why",
    [
        ((1.0, 4.0), "一步要等到拿 12 个单位的 Rank 做完"),  # uneven shards as no faster than one rank
        ((2.0, 2.0), "四份一样大时"),  # the balanced run as slow as the uneven one
        ((0.5, 0.25), "一步要等到拿 12 个单位的 Rank 做完"),  # upside down: one rank's step over the ranks'
    ],
    ids=["uneven as one rank", "balanced as uneven", "inverted"],
)
def test_a_wrong_speedup_prediction_is_named(guess, why):
    with pytest.raises(checks.CheckFailed, match=why):
        checks.check_speedup_prediction(lambda: guess)


def test_a_speedup_prediction_worked_from_the_step_times_passes(capsys):
    def from_step_times():
        one_rank = 24 * 0.010
        return one_rank / (12 * 0.010), one_rank / (6 * 0.010)

    checks.check_speedup_prediction(from_step_times)
    assert "通过" in capsys.readouterr().out


def test_the_rank_that_waits_longest_is_not_the_straggler():
    def most_waiting(values):
        waits = [statistics.median(v["wait_s"]) for v in values]
        return max(range(len(values)), key=lambda r: waits[r]), 0.0

    with pytest.raises(checks.CheckFailed, match=r"Straggler 是 rank \d，你给的是 rank \d。rank \d 等得最久"):
        checks.check_find_straggler(most_waiting)


def test_a_straggler_found_by_summing_steps_is_told_about_the_stalled_step():
    def by_sum(values):  # the loss is computed right (as the reference does), the rank by a sum
        rank = max(range(len(values)), key=lambda r: sum(values[r]["compute_s"]))
        steps = range(len(values[0]["compute_s"]))
        lost = statistics.median(
            max(v["compute_s"][k] for v in values) - statistics.fmean(v["compute_s"][k] for v in values) for k in steps
        )
        return rank, lost

    with pytest.raises(checks.CheckFailed, match=r"计算总和最大，是因为它有一步被卡住了"):
        checks.check_find_straggler(by_sum)


def test_the_synthetic_straggler_records_fool_a_sum_but_not_a_median():
    import random

    rng = random.Random(7)
    for _ in range(50):
        values = review._synthetic_values(rng)
        rank, _ = review.reference_straggler(values)
        sums = [sum(v["compute_s"]) for v in values]
        assert max(range(len(values)), key=lambda r: sums[r]) != rank
        assert all(
            abs(v["wait_s"][k] + v["compute_s"][k] - max(w["compute_s"][k] for w in values)) < 1e-12
            for v in values
            for k in range(5)
        )


# --------------------------------------------------------------------------------------------------------
# 11's part 3: the learner's numbers held against a run (a recorded-shape run here: no ranks needed).

RUN = review.ReviewRun(
    backend="gloo",
    shards=(3, 6, 1),
    compute_ms=(15.2, 30.4, 5.1),
    allreduce_ms=(16.0, 0.9, 26.1),
    step_ms=(31.2, 31.3, 31.2),
    solo_ms=50.3,
    sweep=((1 << 20, 0.00958), (4 << 20, 0.0172)),
)


def _right(**change):
    answers = review.review_answers(RUN)
    answers.update(change)
    return answers


def _rejected(capsys, match, **change):
    with pytest.raises(CheckFailed, match="1 个答案不对"):
        review.check_review_answers(RUN, **_right(**change))
    out = capsys.readouterr().out
    assert "不对" in out and match in out, out


def test_the_right_numbers_pass_and_unwritten_ones_say_so(capsys):
    review.check_review_answers(RUN, **_right())
    assert capsys.readouterr().out.count("通过") == 4
    review.check_review_answers(RUN)  # all None: says what is missing, does not fail
    assert capsys.readouterr().out.count("还没写") == 4


def test_numbers_copied_from_the_print_with_rounding_pass(capsys):
    nbytes, seconds = RUN.sweep[-1]
    review.check_review_answers(
        RUN,
        straggler=1,
        comm_ms=0.9,
        busbw_gbps=round(nbytes / seconds / 1e9 * 4 / 3, 3),
        speedup=round(50.3 / 31.3, 2),
    )
    assert capsys.readouterr().out.count("通过") == 4


def test_the_rank_that_waits_inside_the_all_reduce_is_not_the_straggler(capsys):
    _rejected(capsys, "等待被算成了“通信”", straggler=2)


def test_communication_read_from_the_longest_or_average_all_reduce_is_rejected(capsys):
    _rejected(capsys, "里面大部分是等待", comm_ms=26.1)
    _rejected(capsys, "平均值把等待也摊了进来", comm_ms=sum(RUN.allreduce_ms) / 3)


def test_busbw_mistakes_are_named(capsys):
    nbytes, seconds = RUN.sweep[-1]
    alg = nbytes / seconds / 1e9
    _rejected(capsys, "这是 algbw", busbw_gbps=alg)
    _rejected(capsys, "单方向发出的速率", busbw_gbps=2 * alg * 4 / 3)
    _rejected(capsys, "只数了一个阶段", busbw_gbps=alg * 2 / 3)
    _rejected(capsys, "不是 2^30", busbw_gbps=alg * 4 / 3 * 1e9 / 2**30)


def test_speedup_mistakes_are_named(capsys):
    _rejected(capsys, "倒过来了", speedup=31.3 / 50.3)
    _rejected(capsys, "不会自动快 3 倍", speedup=3.0)
    _rejected(capsys, "模型值", speedup=10 / 6)


def test_a_learner_copying_the_recorded_answers_of_06_08_fails_the_measured_questions(capsys):
    # Without reading this run: the biggest shard's position in 08's 12/6/4/2 (rank 0), 08's 50 ms of
    # communication, the recorded H200 busbw, and 12/6/4/2 on four ranks (2x).
    with pytest.raises(CheckFailed, match="4 个答案不对"):
        review.check_review_answers(RUN, straggler=0, comm_ms=50.0, busbw_gbps=329.6, speedup=2.0)
