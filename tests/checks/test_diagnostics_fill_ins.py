"""Notebook 10's fill-ins: each checker rejects typical wrong answers, naming the mistake, and accepts a correct
answer written differently from the worked notebook's."""

import statistics

import pytest

import mgpu_helpers as mh
from mgpu_helpers import checks
from mgpu_helpers.checks import diagnostics
from mgpu_helpers.measure import diagnose

# -- straggler_or_none ----------------------------------------------------------------------------------


def _median_of(v):
    return statistics.median(v)


def _always_argmin(c, noise):  # never says "nobody": the slow-path reading is missing
    return min(range(len(c)), key=lambda r: _median_of(c[r]))


def _argmax(c, noise):  # the rank that waited longest
    return max(range(len(c)), key=lambda r: _median_of(c[r]))


def _by_mean(c, noise):  # a stalled step sways the mean
    mean = [sum(v) / len(v) for v in c]
    late = min(range(len(c)), key=mean.__getitem__)
    return late if all(m - mean[late] > noise for r, m in enumerate(mean) if r != late) else None


def _against_the_average(c, noise):  # shorter than the others' average, not than each of them
    med = [_median_of(v) for v in c]
    late = min(range(len(c)), key=med.__getitem__)
    others = [m for r, m in enumerate(med) if r != late]
    return late if sum(others) / len(others) - med[late] > noise else None


@pytest.mark.parametrize(
    "wrong, why",
    [
        (_always_argmin, "没有谁在等谁|返回 None"),
        (_argmax, "待得最久"),
        (_by_mean, "平均值"),
        (_against_the_average, "不止一个 Rank 短"),
        (lambda c, noise: None, "别人都在等它"),
    ],
    ids=["never None", "longest", "mean", "against the average", "always None"],
)
def test_straggler_or_none_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        diagnostics.check_straggler_or_none(wrong)


def test_straggler_or_none_may_not_hand_the_work_to_the_course():
    for lazy in (
        lambda c, noise: mh.measure.straggler.straggler_by_collective(c),
        lambda c, noise: mh.measure.diagnose.medians(c).index(min(mh.measure.diagnose.medians(c))),
    ):
        with pytest.raises(checks.CheckFailed, match="课程自己的"):
            diagnostics.check_straggler_or_none(lazy)


def test_straggler_or_none_accepts_an_answer_written_differently(capsys):
    def by_sorting(collective_s, noise_s):
        def median(xs):
            s = sorted(xs)
            mid = len(s) // 2
            return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2

        order = sorted(range(len(collective_s)), key=lambda r: median(collective_s[r]))
        first, second = order[0], order[1]
        return first if median(collective_s[second]) - median(collective_s[first]) > noise_s else None

    diagnostics.check_straggler_or_none(by_sorting)
    assert "通过" in capsys.readouterr().out


def test_the_fill_ins_fall_back_to_the_reference_while_unwritten(capsys):
    assert diagnostics.try_straggler_or_none(None)([[0.03], [0.001], [0.03]], 0.005) == 1
    assert diagnostics.try_straggler_or_none(None)([[0.03], [0.03], [0.03]], 0.005) is None
    assert "还没写" in capsys.readouterr().out


def test_transports_reads_the_word_after_via():
    lines = [
        "[rank 0] vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "[rank 0] vm:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "[rank 1] vm:1:1 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
        "[rank 1] NCCL INFO Connected all rings",
    ]
    assert diagnose.transports(lines) == ["P2P", "SHM"]
