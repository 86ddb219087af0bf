"""The lab's review (mgpu_helpers.checks.lab): the learner's ownership rows and conclusions against the numbers."""

import numpy as np

from mgpu_helpers.checks import lab

DATA = np.arange(10, dtype=np.float32)
TOTAL = float((DATA**2).sum())  # 285


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
        "rank 0：shard (0, 5) 上的平方和应当是 30"
    )
    assert "应当是一个 dict" in lab.review_ownership([{"shard": (0, 10)}], DATA)[0]
