"""The lab's review (mgpu_helpers.checks.lab): the learner's ownership rows and conclusions against the numbers."""
import numpy as np
import pytest

from mgpu_helpers.checks import lab
from mgpu_helpers.measure import sweep

DATA = np.arange(10, dtype=np.float32)
TOTAL = float((DATA ** 2).sum())          # 285


def _row(start, stop, result=TOTAL, ok=True, local=None):
    local = float((DATA[start:stop] ** 2).sum()) if local is None else local
    return {"shard": (start, stop), "local": local, "result": result, "expected": TOTAL, "ok": ok}


def test_a_correct_ownership_run_has_no_problems():
    assert lab.review_ownership([_row(0, 4), _row(4, 7), _row(7, 10)], DATA) == []


def test_a_missing_element_and_unbalanced_shards_are_named():
    problems = lab.review_ownership([_row(0, 4), _row(5, 10)], DATA)
    assert any("元素 4 不归任何 rank" in p for p in problems)
    problems = lab.review_ownership([_row(0, 8), _row(8, 10)], DATA)
    assert problems == ["各 rank 拥有的元素个数是 [8, 2]：差得超过 1 个，最慢的 Rank 会拖住所有人。"]


def test_a_check_that_cannot_fail_is_caught_by_the_result():
    problems = lab.review_ownership([_row(0, 5, result=30.0, ok=True), _row(5, 10)], DATA)
    assert any(p.startswith("rank 0 All-Reduce 之后得到 30") and "局部结果" in p for p in problems)
    assert any(p.startswith("rank 0 自己的判断 ok = True") for p in problems)


def test_a_wrong_local_result_and_a_malformed_row_are_named():
    assert lab.review_ownership([_row(0, 5, local=1.0), _row(5, 10)], DATA)[0].startswith(
        "rank 0：shard (0, 5) 上的平方和应当是 30")
    assert "应当是一个 dict" in lab.review_ownership([{"shard": (0, 10)}], DATA)[0]


STEPS = [{"nbytes": 1024, "compute_us": 500.0, "wait_us": 20.0, "comm_us": 30.0},
         {"nbytes": 1 << 20, "compute_us": 500.0, "wait_us": 20.0, "comm_us": 450.0},
         {"nbytes": 1 << 30, "compute_us": 500.0, "wait_us": 20.0, "comm_us": 4000.0}]
SWEEP = [sweep.SweepRow(op, n, t, 1.0, 1.0, 2, "nccl", 20)
         for n, ar in ((1024, 16.0), (1 << 30, 3280.0)) for op, t in (("all_reduce", ar), ("rs_ag", ar * 1.19))]


def test_claims_are_held_against_the_rows_one_verdict_each():
    claims = {"limiting": {"1 KiB": "compute", 1 << 20: "communicate", "1G": "compute"}, "rs_ag_over_ar": 1.2}
    verdicts = lab.review_claims(claims, STEPS, SWEEP)
    assert [v.holds for v in verdicts] == [True, True, False, True]
    assert "一次运行分不出谁大" in verdicts[1].evidence          # 450 us against 500 us: too close to call
    assert "最大的是 communicate，是 compute 的 8.0 倍" in verdicts[2].evidence
    assert verdicts[3].claim == "1 GiB 上 RS+AG 的时间是 All-Reduce 的 1.20 倍"


def test_sizes_not_claimed_or_not_measured_cannot_be_judged_and_bad_words_are_refused():
    claims = {"limiting": {"4 KiB": "compute", "1 KiB": "network"}, "rs_ag_over_ar": 1.19}
    verdicts = lab.review_claims(claims, STEPS, SWEEP)
    by_claim = {v.claim: v for v in verdicts}
    assert by_claim["1 KiB 上最大的是 network"].holds is False
    assert by_claim["4 KiB 上最大的是 compute"].holds is None
    assert by_claim["1 MiB 上最大的是哪一段"].holds is None and by_claim["1 GiB 上最大的是哪一段"].holds is None
    assert "? 4 KiB 上最大的是 compute：无法判断。这个规模没有测" in by_claim["4 KiB 上最大的是 compute"].line()


def test_the_inverse_ratio_is_recognised_as_the_busbw_ratio():
    verdict = lab.review_claims({"limiting": {}, "rs_ag_over_ar": 1 / 1.19}, STEPS, SWEEP)[-1]
    assert verdict.holds is False and "倒数" in verdict.evidence


@pytest.mark.parametrize("claims,match", [
    ("compute everywhere", "结论要写成"),
    ({"limiting": {"lots": "compute"}, "rs_ag_over_ar": 1.0}, "规模 'lots' 读不懂"),
    ({"limiting": {}, "rs_ag_over_ar": "a bit"}, "要写成一个数"),
])
def test_malformed_claims_say_how_to_write_them(claims, match):
    with pytest.raises(ValueError, match=match):
        lab.review_claims(claims, STEPS, SWEEP)
