"""The fill-in protocol (mgpu_helpers.checks.core.fill_in) where tests/checks/test_exercises.py leaves off: under
nbgrader's autograde an unwritten fill-in fails, a helper still unwritten deeper down falls back like the stub,
and the try_x a lesson's cell calls is recorded under its checker's name."""

import pytest
from learner_code import by_value

from mgpu_helpers.checks.core import NOT_DONE, CheckFailed, fill_in, fill_in_cell

STUB = 'def double(x):\n    raise NotImplementedError("练习：补全这里（约 1 行）")\n'


def _reference(x):
    return 2 * x


def check_double(fn):  # a checker of the test's own (in the test's file: it may call no course code itself)
    if fn(3) != 6:
        raise CheckFailed("double(3) 应当是 6")
    print("通过：double")


def test_under_autograde_an_unwritten_fill_in_fails_instead_of_borrowing(monkeypatch):
    monkeypatch.setenv("MGPU_GRADING", "1")
    with pytest.raises(CheckFailed, match=f"^{NOT_DONE}：double"):
        fill_in(by_value(STUB, "double"), check_double, _reference, "double")


def test_a_helper_still_unwritten_deeper_down_falls_back_like_the_stub(capsys):
    from mgpu_helpers.checks import sharding
    from mgpu_helpers.lessons import sharding_rules

    helper_unwritten = by_value(
        """
        def bounds(n, ws):
            raise NotImplementedError("练习：补全这里（约 3 行）")
        def contiguous_ranges(n, ws):
            return [range(a, b) for a, b in bounds(n, ws)]""",
        "contiguous_ranges",
    )
    assert sharding.try_contiguous_ranges(helper_unwritten) is sharding_rules.contiguous_ranges
    assert "还没写完" in capsys.readouterr().out


def test_a_fill_in_cell_is_recorded_under_its_checkers_name_and_checks_at_once(capsys):
    try_double = fill_in_cell(check_double, _reference, "double")
    assert try_double.checker == "check_double"
    own = by_value("def double(x):\n    return x + x\n", "double")
    assert try_double(own) is own and "通过：double" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="应当是 6"):
        try_double(by_value("def double(x):\n    return x * x\n", "double"))
