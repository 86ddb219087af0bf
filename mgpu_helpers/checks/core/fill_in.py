"""The fill-in protocol: while the learner's function is the stub the course's version stands in (so the rest of
the notebook runs), a wrong answer stops the cell, a right one is used (and kept, for a later notebook)."""

import os

from .course_code import course_object, refuse_course_code, refusing, resolve_course
from .failure import NOT_DONE, CheckFailed, _inner, has_stub, not_done

OWN_WORK = "这一格要你自己写出它的计算。"  # what a refusal of the course's code says to do instead


def fill_in(fn, check, reference, what: str, keep: str = "", lesson: str = ""):
    """A lesson's fill-in, checked at once (``check(fn)`` prints ``通过：...`` or raises): what the cells after it
    should use; while ``fn`` is the stub (or ``None``) ``reference``, said so (under nbgrader's autograde,
    ``$MGPU_GRADING``, it fails instead). ``keep``: once it passes, ``fn`` is stored under that name (``lesson``:
    this notebook's number)."""
    if fn is None or has_stub(fn):
        if os.environ.get("MGPU_GRADING"):  # nbgrader's autograde (tools/grading.py): unwritten is a fail
            raise not_done(fn, what)
        print(f"「{what}」还没写：下面的单元格先用课程的参考实现。写好之后再运行这一格，它会立刻检查你的版本。")
        return reference
    try:
        check(fn)
    except CheckFailed as exc:
        if str(exc).startswith(NOT_DONE):  # the stub was reached deeper down (a helper still unwritten)
            print(f"「{what}」还没写完：{str(exc)[len(NOT_DONE) + 1 :]} 下面的单元格先用课程的参考实现。")
            return reference
        raise
    if keep:
        from mgpu_helpers import own_code

        if own_code.save(keep, fn, lesson, check) is not None:
            print(f"你的 {keep} 已经存下：后面的笔记本会用它。")
    return fn


def passed(text: str) -> None:
    """Say that the check passed, and note it in the learner's progress (:mod:`mgpu_helpers.tracking`)."""
    from mgpu_helpers import tracking

    print(f"通过：{text}")
    tracking.record("check", tracking.checker_name())


def fill_in_cell(check, reference, what: str, refuse=(), **keep):
    """``try_x(fn)``, what a lesson's fill-in cell calls: :func:`fill_in` with ``check`` and the course's
    ``reference``, which with ``refuse`` and the course's models, widgets and checks is refused to the learner's
    code. Both may be dotted names, imported at the call: the lessons' modules bring torch or Numba, which the
    checkers do not import."""

    def try_fill_in(fn):
        ref = course_object(reference) if isinstance(reference, str) else reference

        def checked(fn):  # the course's code refused to fn: read before, watched while it runs
            course = [c for c in [ref, *resolve_course(refuse)] if callable(c)]
            refuse_course_code(fn, what, course, advice=OWN_WORK)
            with refusing(what, [c for c in course if _inner(c) is not _inner(fn)], OWN_WORK):
                check(fn)

        # own_code records the checker by name, to run it again when the kept code is loaded
        for attr in ("__name__", "__qualname__", "__module__"):
            setattr(checked, attr, getattr(check, attr))
        return fill_in(fn, checked, ref, what, **keep)

    try_fill_in.__doc__ = f"The fill-in「{what}」: the learner's version once ``{check.__name__}`` passes."
    try_fill_in.checker = check.__name__  # the name its passing is recorded under (tracking)
    return try_fill_in
