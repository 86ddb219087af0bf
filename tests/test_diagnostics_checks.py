"""ex10's number-first checker: a wrong prediction of where a hang stops is named, with the schedules."""
import pytest

from mgpu_helpers import checks


def test_counting_collectives_from_one_is_named_with_the_schedules():
    def one_based(schedules):
        for seq in range(min(len(s) for s in schedules)):
            names = [s[seq] for s in schedules]
            if len(set(names)) > 1:
                rank = next(r for r, n in enumerate(names) if names.count(n) == 1)
                return (seq + 1, rank, names[rank])

    with pytest.raises(checks.CheckFailed, match=r"\d 个 Rank 的调用顺序（rank 0: .*第 #\d+ 个上 rank \d 调用 .*序号从 0 开始数"):
        checks.check_predict_hang(one_based)


def test_naming_the_majority_operation_is_refused():
    def majority(schedules):
        from collections import Counter
        for seq in range(min(len(s) for s in schedules)):
            names = [s[seq] for s in schedules]
            if len(set(names)) > 1:
                common = Counter(names).most_common(1)[0][0]
                rank = next(r for r, n in enumerate(names) if n != common)
                return (seq, rank, common)

    with pytest.raises(checks.CheckFailed, match=r"应当回答 \(\d+, \d, '\w+'\)，你的回答是"):
        checks.check_predict_hang(majority)


def test_a_prediction_that_is_not_three_values_is_refused():
    with pytest.raises(checks.CheckFailed, match=r"应当返回 \(seq, rank, name\) 三个值"):
        checks.check_predict_hang(lambda schedules: 3)
