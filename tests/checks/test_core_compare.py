"""Comparing an answer with the reference (mgpu_helpers.checks.core.compare): the first difference named, the
usual wrong formulas recognised, a rank number told from a bool."""

import numpy as np
import pytest

from mgpu_helpers.checks.core import CheckFailed, compare, expect_items, is_rank_number, matching_hint


def test_the_first_wrong_element_is_named_with_its_index_and_both_values():
    with pytest.raises(CheckFailed, match=r"rank 1：第 2 个元素应当是 3，实际是 NaN（没有写入）（共 1 个元素不对）"):
        compare([1.0, 2.0, float("nan")], [1.0, 2.0, 3.0], "rank 1")
    with pytest.raises(CheckFailed, match="返回了 None"):
        compare(None, [1.0], "rank 0")
    with pytest.raises(CheckFailed, match=r"形状是 \(2,\)，应当是 \(3,\)"):
        compare([1, 2], [1, 2, 3], "rank 0")
    compare(np.array([1.0, 2.0]), [1.0, 2.0 + 1e-7], "rank 0")  # within the tolerance


def test_a_known_wrong_formula_is_named_and_an_unknown_one_gets_the_default():
    slips = [(None, "never"), (8.0, "algbw"), (4.0, "half")]
    assert matching_hint(4.0, slips, "other") == "half"
    assert matching_hint(5.0, slips, "other") == "other"


def test_an_answer_of_the_wrong_shape_fails_with_the_message_given():
    expect_items((1, 2.5), 2, "two numbers", numbers=True)
    for got in ((1,), [1, "2"], "12", None):
        with pytest.raises(CheckFailed, match="two numbers"):
            expect_items(got, 2, "two numbers", numbers=True)


def test_a_numpy_integer_is_a_rank_and_a_bool_is_not():
    assert is_rank_number(np.argmin([3.0, 1.0, 2.0])) and is_rank_number(2)
    assert not any(is_rank_number(v) for v in (True, np.bool_(False), 1.0, "1", None))
