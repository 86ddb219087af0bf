"""The fill-in protocol (mgpu_helpers.checks.core.fill_in) where tests/checks/test_exercises.py leaves off: under
nbgrader's autograde an unwritten fill-in fails, a helper still unwritten deeper down falls back like the stub,
and the try_x a lesson's cell calls is recorded under its checker's name."""

import pytest
from learner_code import by_value

from mgpu_helpers.checks.core import NOT_DONE, CheckFailed, fill_in, fill_in_cell, has_stub

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


def test_check_failed_is_an_assertion_error():
    assert issubclass(CheckFailed, AssertionError)


def test_fill_in_gives_the_reference_for_a_stub_and_the_learners_function_once_it_passes(capsys):
    def reference(x):
        return 2 * x

    def check(fn):
        if fn(3) != 6:
            raise CheckFailed(f"double(3) 应当是 6，实际是 {fn(3)}")
        print("通过：double")

    stub = by_value('def double(x):\n    raise NotImplementedError("练习：补全这里（约 1 行）")\n', "double")
    assert fill_in(stub, check, reference, "double") is reference
    assert "还没写" in capsys.readouterr().out
    assert fill_in(None, check, reference, "double") is reference
    good = by_value("def double(x):\n    return x + x\n", "double")
    assert fill_in(good, check, reference, "double") is good
    assert capsys.readouterr().out.startswith("还没写") is False
    wrong = by_value("def double(x):\n    return x * x\n", "double")
    with pytest.raises(CheckFailed, match="应当是 6"):
        fill_in(wrong, check, reference, "double")


def test_a_fill_in_cell_looks_up_the_course_version_when_called_and_refuses_it_in_the_answer(capsys):
    from mgpu_helpers.lessons import cost_model

    def check(fn):
        if fn(1 << 20, 4, 0.0, 1e-9) != pytest.approx(2 * 3 / 4 * (1 << 20) * 1e-9):
            raise CheckFailed("不对")

    try_cost = fill_in_cell(
        check,
        "mgpu_helpers.lessons.cost_model.ring_allreduce_seconds",
        "cost",
        refuse=["mgpu_helpers.lessons.cost_model.ring_allreduce_seconds"],
    )
    assert try_cost(None) is cost_model.ring_allreduce_seconds and "还没写" in capsys.readouterr().out
    own = by_value("def cost(nbytes, p, alpha, beta):\n    return 2 * (p - 1) * (alpha + nbytes / p * beta)\n", "cost")
    assert try_cost(own) is own
    calls_course = by_value(
        "import mgpu_helpers as mh\ndef cost(nbytes, p, alpha, beta):\n"
        "    return mh.lessons.cost_model.ring_allreduce_seconds(nbytes, p, alpha, beta)\n",
        "cost",
    )
    with pytest.raises(CheckFailed, match="课程"):
        try_cost(calls_course)
    # A class counts as unwritten while one of its methods still holds the stub.
    half_done = by_value(
        "class Step:\n    def setup(self):\n        return 1\n    def step(self):\n"
        "        raise NotImplementedError('练习：补全这里（约 2 行）')\n",
        "Step",
    )
    assert has_stub(half_done) and try_cost(half_done) is cost_model.ring_allreduce_seconds


def test_every_lesson_fill_in_hands_back_the_course_version_while_unwritten(capsys):
    """Each ``try_x`` of the checkers finds the course's version it names (a wrong dotted name fails here, not in a
    learner's notebook)."""
    import importlib
    import inspect
    import pkgutil

    import mgpu_helpers.checks as package

    tried = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"mgpu_helpers.checks.{info.name}")
        for name, fn in vars(module).items():
            if name.startswith("try_") and callable(fn) and len(inspect.signature(fn).parameters) == 1:
                assert fn(None) is not None, name
                tried.append(name)
    assert len(tried) >= 25, tried  # a sanity floor: issue #38 removed transcription fill-ins
    assert "还没写" in capsys.readouterr().out
