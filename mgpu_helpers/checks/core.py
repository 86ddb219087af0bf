"""The checkers' shared machinery: the failure type, comparing with a reference, running code on ranks.

Every checker uses one copy of each rule this module enforces:

- the fill-in protocol (:func:`fill_in`): a stub falls back to the course's version, a wrong answer stops;
- the course's own code is not the learner's: :func:`course_code_reached` / :func:`refuse_course_code` read
  the learner's function (any alias, import path or helper of its own) on the notebook side, and
  :class:`WatchedCalls` makes the same objects refuse to run inside the ranks;
- which ``torch.distributed`` calls the learner's code made, under any name (:class:`WatchedCalls`: the
  functions' code is replaced in the rank), forbidden ones refused, sends and bytes counted;
- launching on ranks (:func:`launch`, :func:`run_on_ranks`, :func:`run_problem`): a hang is reported after
  :data:`HANG_S` seconds with the call and line each rank waits in; an error names the rank and the mistake.
"""

import contextlib
import importlib
import itertools
import math
import operator
import os
import signal
import sys
import sysconfig
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

NOT_DONE = "这个练习还没有完成"
STUB_MARK = "练习：补全这里"
WORLD_SIZES = (2, 3, 4)


class CheckFailed(AssertionError):
    """A checker found something wrong; the message says what, in Chinese.

    In IPython (a notebook) it shows as that message alone, not as a traceback through the checkers' code
    (IPython's ``_render_traceback_`` hook); :func:`show_trace` prints the whole traceback for who wants it."""

    def _render_traceback_(self):
        return [
            "\x1b[1;31m检查没有通过\x1b[0m",
            *str(self).splitlines(),
            "",
            "（想看检查是在哪一步发现的：运行 mh.checks.show_trace()）",
        ]


def show_trace() -> None:
    """Print the whole traceback of the last error a notebook cell raised (a failed check shows only its
    message): IPython keeps it in ``sys.last_value``."""
    exc = getattr(sys, "last_value", None)
    if exc is None:
        print("还没有出错的单元格。")
    else:
        traceback.print_exception(type(exc), exc, exc.__traceback__)


# --------------------------------------------------------------------------------------------------------
# Shared machinery.


def _inner(fn):
    """The Python function behind a Numba kernel / dispatcher / ``functools.wraps`` wrapper, else ``fn``."""
    return getattr(fn, "py_func", None) or getattr(fn, "fn", None) or getattr(fn, "__wrapped__", None) or fn


def name_of(fn) -> str:
    return getattr(_inner(fn), "__name__", repr(fn))


def not_done(fn, what: str) -> CheckFailed:
    return CheckFailed(
        f"{NOT_DONE}：{what}。`{name_of(fn)}` 里还是练习占位 raise NotImplementedError"
        '（"练习：补全这里"）；在那里写下你的代码，再运行这个检查。'
    )


def is_stub_error(exc: BaseException) -> bool:
    return isinstance(exc, NotImplementedError) or getattr(exc, "exc_type", None) == "NotImplementedError"


def _code_objects(code):
    """``code`` (may be None) and every code object nested in it: the functions defined inside, comprehensions."""
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        yield c
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))


def has_stub(fn) -> bool:
    """True when ``fn`` (a function, a Numba kernel, or a class: one of its methods) still holds the generated
    stub's text."""
    if isinstance(fn, type):
        return any(has_stub(method) for method in vars(fn).values() if callable(method))
    return any(
        isinstance(const, str) and STUB_MARK in const
        for c in _code_objects(getattr(_inner(fn), "__code__", None))
        for const in c.co_consts
    )


def fill_in(fn, check, reference, what: str, keep: str = "", lesson: str = ""):
    """A lesson's fill-in, checked at once: what the cells after it should use.

    ``check(fn)`` runs the area's checker (it prints ``通过：...`` or raises :class:`CheckFailed` naming the
    mistake). While ``fn`` is still the generated stub (or ``None``), nothing is checked: this says so and
    returns ``reference``, the course's own version, so the rest of the notebook runs either way (under
    nbgrader's autograde, ``$MGPU_GRADING`` set, an unwritten fill-in fails instead). A wrong
    ``fn`` raises: the cell stops at the mistake, and the cells after it keep the last good value.

    ``keep``: a later notebook builds on this function: once it passes, its source is stored under that name
    (:mod:`mgpu_helpers.own_code`; ``lesson``: this notebook's number), for ``mh.mine(keep, fallback=...)``.
    """
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


def call(fn, what: str, *args):
    """``fn(*args)``, with the stub's NotImplementedError turned into the "not done yet" failure."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise not_done(fn, what) from None


def answers(fn, what: str, cases, calling=call):
    """``(case, fn(*case))`` for each case (a tuple of ``fn``'s arguments) in turn, each call through ``calling``
    (:func:`call`, or :func:`call_limited`): the learner's answer on every case a checker draws, got only when
    the loop reaches it."""
    for case in cases:
        yield case, calling(fn, what, *case)


def require_written(fn, what: str) -> None:
    """Raise the "not done yet" failure while ``fn`` still holds the generated stub (:func:`has_stub`)."""
    if has_stub(fn):
        raise not_done(fn, what)


def first_hint(*slips, default: str = "") -> str:
    """The text of the first ``(it is this mistake, text)`` pair that holds, else ``default``."""
    return next((text for holds, text in slips if holds), default)


def fail_first(*slips) -> None:
    """Raise :class:`CheckFailed` with the text of the first ``(it is this mistake, text)`` pair that holds: a
    checker's rules in order, each with its message (every condition is evaluated, so each must be safe to)."""
    if text := first_hint(*slips):
        raise CheckFailed(text)


def matching_hint(got, slips, default: str = "", **tolerance) -> str:
    """The text of the first ``(value, text)`` in ``slips`` whose value ``got`` equals (:func:`math.isclose`
    with ``tolerance``; a value of None matches nothing), else ``default``: the usual wrong formulas, named."""
    return next((text for value, text in slips if value is not None and math.isclose(got, value, **tolerance)), default)


def expect_items(got, count: int, failure: str, numbers: bool = False) -> None:
    """Raise :class:`CheckFailed` saying ``failure`` unless ``got`` is a tuple or list of ``count`` items (with
    ``numbers``: each a real number, :func:`is_number`)."""
    if not isinstance(got, (tuple, list)) or len(got) != count or numbers and not all(map(is_number, got)):
        raise CheckFailed(failure)


def number_answer(got, failure: str) -> float:
    """``float(got)`` when the learner returned a real number (:func:`is_number`; a NumPy scalar counts as its
    value), else a :class:`CheckFailed` saying ``failure``."""
    value = got.item() if isinstance(got, np.generic) else got
    if not is_number(value):
        raise CheckFailed(failure)
    return float(value)


# -- a time limit on the learner's Python code ----------------------------------------------------------------

CALL_LIMIT_S = 2.0


class TooLong(Exception):
    """Raised in the learner's code when :func:`time_limit` runs out."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`TooLong` in the code run inside after ``seconds``. The limit is a SIGALRM timer, so it
    applies in the main thread (a notebook's cells); elsewhere the code runs without one."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def ring(signum, frame):
        raise TooLong()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def deadline(seconds: float, what: str):
    """Stop the learner's Python code after ``seconds`` with a failure that says it never ended (an endless
    loop), so the cell returns and the kernel session stays usable (:func:`time_limit`)."""
    try:
        with time_limit(seconds):
            yield
    except TooLong:
        raise CheckFailed(
            f"{what}：你的函数过了 {seconds:g} 秒还没有算完（正常只要几毫秒），多半是循环没有结束"
            "（循环变量忘了改，或者条件永远成立）。"
        ) from None


def call_limited(fn, what: str, *args, seconds: float = CALL_LIMIT_S):
    """:func:`call` with a time limit (:func:`time_limit`): an answer that never returns (a loop that does not
    stop) fails within ``seconds``, naming the call and the line it was on; the kernel stays usable."""
    try:
        with time_limit(seconds):
            return call(fn, what, *args)
    except TooLong as exc:
        code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if code and f.filename == code.co_filename]
        where = f"，停在第 {frames[-1].lineno} 行：{frames[-1].line}" if frames and frames[-1].line else ""
        raise CheckFailed(
            f"{what}：{getattr(fn, '__name__', 'fn')}({', '.join(map(repr, args))}) 过了 {seconds:g} "
            f"秒还没有返回{where}。多半是循环的条件永远成立：检查它在这组输入上会不会停。"
        ) from None


def is_rank_number(v) -> bool:
    """A whole number that can name a rank: a Python or NumPy integer (``np.argmin`` gives one), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def is_number(v) -> bool:
    """A real number the learner returned: int or float, not a bool, not NaN."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def fmt(v) -> str:
    v = float(v)
    return "NaN（没有写入）" if math.isnan(v) else f"{v:g}"


def compare(got, want, where: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Element by element; the first difference is named (index, expected, got)."""
    if got is None:
        raise CheckFailed(f"{where}：返回了 None。函数最后要 return 结果。")
    if isinstance(got, (list, tuple)) and got and not np.isscalar(got[0]):
        raise CheckFailed(
            f"{where}：返回了一个含 {len(got)} 个对象的列表；应当返回一个张量（列表可以用 torch.cat 拼起来）。"
        )
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise CheckFailed(f"{where}：结果的形状是 {got.shape}，应当是 {want.shape}。{hint}".rstrip())
    ok = np.isclose(got, want, atol=atol, rtol=rtol) & ~np.isnan(got)
    if not ok.all():
        bad = np.argwhere(~ok)
        k = tuple(int(i) for i in bad[0])
        idx = k[0] if len(k) == 1 else list(k)
        raise CheckFailed(
            f"{where}：第 {idx} 个元素应当是 {fmt(want[k])}，实际是 {fmt(got[k])}"
            f"（共 {len(bad)} 个元素不对）。{hint}".rstrip()
        )


# -- the course's own code is not the learner's -----------------------------------------------------------
#
# One question, asked in two places. On the notebook side, before anything runs: does the learner's function
# *reach* the course's implementation (or the checker's reference) by any name, import or helper of its own?
# :func:`course_code_reached` reads the function's bytecode for that. Inside the ranks the same objects are
# also made to refuse when called (:class:`WatchedCalls`), so a path the bytecode does not show (getattr with
# a computed name, a copy stored in a list) is caught when it runs.

COURSE_PACKAGES = ("mgpu_helpers.lessons", "mgpu_helpers.checks")
_NOT_LEARNER = ("mgpu_helpers", "torch", "numpy", "numba", "cupy", "builtins", "math", "functools", "itertools")


def _in_packages(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _from(obj, packages) -> bool:
    """True when ``obj`` (a module, function or class) is defined in one of ``packages``."""
    if isinstance(obj, types.ModuleType):
        return _in_packages(obj.__name__, packages)
    return callable(obj) and _in_packages(getattr(obj, "__module__", "") or "", packages)


def _is_learners(obj) -> bool:
    """A function or class the learner wrote (not the course's, not a library's): its names are followed too."""
    return not _in_packages(getattr(obj, "__module__", "") or "", _NOT_LEARNER)


def _import(name: str):
    """The module ``name``, or None when it cannot be imported (a module the machine lacks: the run will say so)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _attribute(obj, name: str, default=None):
    """``obj.name``, else the submodule ``obj.name`` not imported yet, else ``default``."""
    try:
        return getattr(obj, name)
    except AttributeError:
        module = _import(f"{obj.__name__}.{name}")
        return default if module is None else module


def _names_reached(fn):
    """``(dotted name, object)`` for everything ``fn``'s code reaches by name: globals and builtins, with
    attribute chains resolved through modules and classes (``mh.lessons.p2p.exchange``), imports inside the
    function (``from torch.distributed import all_reduce as ar``), closure cells and default values."""
    import builtins
    import dis

    inner = _inner(fn)
    code = getattr(inner, "__code__", None)
    if code is None:
        return
    scope = getattr(inner, "__globals__", {})
    cells = {}  # the closure's filled cells
    for cell_name, cell in zip(code.co_freevars, inner.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            cells[cell_name] = cell.cell_contents
    yield from cells.items()
    for value in (getattr(inner, "__defaults__", None) or ()) + tuple(
        (getattr(inner, "__kwdefaults__", None) or {}).values()
    ):
        yield "默认参数", value
    missing = object()
    for c in _code_objects(code):
        chain, obj, base = None, None, None  # the a.b.c being read; the module of an import
        imported, local = None, {}  # what an import just gave; locals bound to imports
        for ins in dis.get_instructions(c):
            op = ins.opname
            if op in ("STORE_FAST", "STORE_DEREF") and imported is not None:
                local[ins.argval] = imported
            if op not in ("IMPORT_FROM", "IMPORT_NAME", "SWAP", "POP_TOP"):
                imported = None
            if op in ("LOAD_ATTR", "LOAD_METHOD") and obj is not None:
                # (a chain that reaches None, or an attribute of an instance, ends here: only modules and
                # classes are read further)
                obj = _attribute(obj, ins.argval) if isinstance(obj, (types.ModuleType, type)) else None
                chain = f"{chain}.{ins.argval}"
                continue
            if op in ("PRECALL", "CACHE", "EXTENDED_ARG", "PUSH_NULL"):
                continue
            if obj is not None:  # the chain ends here: what it names is what is used
                yield chain, obj
            chain, obj = None, None
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                name = ins.argval
                chain, obj = name, scope.get(name, getattr(builtins, name, None))
            elif op in ("LOAD_FAST", "LOAD_DEREF") and ins.argval in local:
                chain, obj = ins.argval, local[ins.argval]
            elif op == "LOAD_DEREF" and ins.argval in cells:
                chain, obj = ins.argval, cells[ins.argval]
            elif op == "IMPORT_NAME":
                base = _import(ins.argval)
                if base is not None:
                    imported = base
                    yield ins.argval, base
            elif op == "IMPORT_FROM" and base is not None:
                value = _attribute(base, ins.argval, missing)
                if value is not missing:
                    imported = value
                    yield f"{base.__name__}.{ins.argval}", value
        if obj is not None:
            yield chain, obj


def code_names(fn) -> set[str]:
    """Every global and attribute name the code of ``fn`` (a function, a Numba kernel, a wrapper) and the
    functions defined inside it refer to."""
    return {name for c in _code_objects(getattr(_inner(fn), "__code__", None)) for name in c.co_names}


def course_code_reached(fn, references=(), packages=(), names=(), depth: int = 4) -> str | None:
    """The name under which ``fn`` is, or reaches, the course's own code; ``None`` when it does not.

    Counted as the course's: ``references`` (the course's implementation of this fill-in, the checker's
    reference: by identity; a worked lesson's own cell is the source of mh.lessons, so the same code defined
    again in a cell is not refused), and any module, function or class defined in
    ``packages`` (e.g. :data:`COURSE_PACKAGES`). Followed: every name in ``fn``'s code (globals, ``a.b.c``
    chains, imports inside it, closures, defaults), and, ``depth`` levels deep, the learner's own helper
    functions and classes it reaches (their methods too), so a helper that calls the course's code, or an
    alias of it, is found as well. ``names``: names that count as the course's wherever they appear in the
    code (for a course function reached through an object, e.g. ``model.memory_plan(...)``).
    """
    references = tuple(r for r in references if r is not None)

    def ours(obj) -> bool:
        try:
            if any(obj is r or _inner(obj) is _inner(r) for r in references):
                return True
        except Exception:
            return False
        return _from(obj, packages)

    def label(name, obj) -> str:
        name = name.replace("mgpu_helpers", "mh", 1) if name else name
        module = getattr(obj, "__name__", "") if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
        qual = getattr(obj, "__qualname__", None)
        full = (f"{module}.{qual}" if qual and module else module or name).replace("mgpu_helpers", "mh", 1)
        return full if name in (None, full, qual) or full.endswith("." + name) else f"{full}（你的代码里叫 {name}）"

    if ours(fn):
        return label(None, fn)
    todo, seen = [(fn, 0)], set()
    while todo:
        f, d = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        members = [f]
        if isinstance(f, type):  # a class the learner wrote: its bases and its methods
            for base in f.__mro__[1:]:
                if base is not object and ours(base):
                    return f"{label(None, base)}（{f.__name__} 的基类）"
            members = [
                v.__func__ if isinstance(v, (staticmethod, classmethod)) else getattr(v, "fget", v)
                for v in vars(f).values()
            ]
        for member in members:
            hit = sorted(code_names(member) & set(names))
            if hit:
                return hit[0]
            for name, obj in _names_reached(member):
                if ours(obj):
                    return label(name, obj)
                if d < depth and _is_learners(obj) and (callable(obj) or isinstance(obj, type)):
                    todo.append((obj, d + 1))
    return None


def refuse_course_code(fn, what: str, references=(), packages=(), advice: str = "", names=()) -> None:
    """Raise :class:`CheckFailed` when ``fn`` is, or reaches, the course's own code (:func:`course_code_reached`)."""
    if name := course_code_reached(fn, references, packages, names):
        raise CheckFailed(
            f"{what}：`{name_of(fn)}` 用到了课程自己的 {name}——这是课程自己的实现（或检查用的参考答案），"
            f"不算你写的代码。{advice or '在你的单元格里自己写出来。'}"
        )


@contextlib.contextmanager
def refusing_course_code(fn, what: str, targets):
    """While checking ``fn`` in the notebook's own process: ``targets`` (the course's functions, ``[(module,
    attribute name)]`` or function objects) may not be used. Reached by name (:func:`refuse_course_code`) it is
    refused at once; reached some other way, the function's code is replaced (every alias runs it) by one that
    raises :class:`CheckFailed` when the caller is not the course's own code (the checker's reference may
    still use it). The code is put back afterwards."""
    objs = [getattr(t[0], t[1]) if isinstance(t, tuple) else t for t in targets]
    refuse_course_code(fn, what, objs, advice="这一格要你自己写出它的计算。")
    swapped = SwappedCode()

    def guard(label):
        def hook(original, args, kwargs):
            if not _called_for_the_learner(sys._getframe(3)):  # hook <- lambda <- swapped code <- caller
                return original(*args, **kwargs)  # the checker's own reference
            raise CheckFailed(f"{what}：调用了课程自己的 {label}；这一格要你自己写出它的计算。")

        return hook

    try:
        for obj in objs:
            inner = _inner(obj)
            if (
                getattr(inner, "__code__", None) is not None
                and inner is not _inner(fn)
                and _in_packages(getattr(inner, "__module__", "") or "", ("mgpu_helpers",))
            ):
                swapped.hook(inner, guard(getattr(inner, "__name__", "函数")))
        yield
    finally:
        swapped.restore()


_LIBRARIES = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
_CHECKERS = os.path.join("mgpu_helpers", "checks", "")


_GUARDED = tuple(os.path.join("mgpu_helpers", part, "") for part in ("models", "widgets", "checks"))


def _learners(path: str) -> bool:
    """A frame of the learner's code (a notebook cell, a file of theirs): not a library's, not the course's."""
    return not (path.startswith(_LIBRARIES) or "mgpu_helpers" in path or path.startswith("<frozen"))


@contextlib.contextmanager
def guarding_course_code(what: str):
    """While a fill-in is checked: a function of the course's ``models``, ``widgets`` or ``checks`` called by the
    learner's own code (directly, through an alias, or from a helper of theirs) raises :class:`CheckFailed`.
    These compute what fill-ins ask for and are never part of an answer; the checker may still use them."""

    def profile(frame, event, _arg):
        code = frame.f_code
        if (
            event == "call"
            and any(g in code.co_filename for g in _GUARDED)
            and frame.f_back is not None
            and _learners(frame.f_back.f_code.co_filename)
            and not code.co_filename.endswith("(watcher)")
        ):
            module = frame.f_globals.get("__name__", "").replace("mgpu_helpers", "mh", 1)
            raise CheckFailed(f"{what}：调用了课程自己的 {module}.{code.co_name}；这一格要你自己写出它的计算。")

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(before)


def _called_for_the_learner(frame) -> bool:
    """True when, between ``frame`` (a call of a refused course function) and the checker that started it, a
    frame of the learner's own code runs: the learner's function, a wrapper of theirs, or a course function
    the learner called that calls on. The checker's own use of its reference has no such frame."""
    while frame is not None:
        path = frame.f_code.co_filename
        if _CHECKERS in path and not path.endswith("(watcher)"):
            return False
        if _learners(path):
            return True
        frame = frame.f_back
    return False


def fill_in_cell(check, reference, what: str, refuse=(), **keep):
    """The function a lesson's fill-in cell calls, ``try_x(fn)``: :func:`fill_in` with this checker, the course's
    version ``reference`` and the label ``what`` (``keep``: :func:`fill_in`'s ``keep`` and ``lesson``).
    ``check`` runs while ``reference`` and ``refuse`` (other course functions the learner's may not call)
    refuse to serve the learner's code (:func:`refusing_course_code`). ``reference`` and the items of
    ``refuse`` may be dotted names (``"mgpu_helpers.lessons.p2p.exchange"``), imported at the call: the
    lessons' modules bring torch or Numba, which the checkers do not import (:func:`course_object`)."""

    def try_fill_in(fn):
        ref = course_object(reference) if isinstance(reference, str) else reference

        def checked(fn):
            course = [ref] + [obj for obj, _label in resolve_course(refuse)]
            with refusing_course_code(fn, what, [c for c in course if callable(c)]), guarding_course_code(what):
                check(fn)

        # own_code records the checker by name, to run it again when the kept code is loaded
        checked.__name__, checked.__qualname__, checked.__module__ = (
            check.__name__,
            check.__qualname__,
            check.__module__,
        )
        return fill_in(fn, checked, ref, what, **keep)

    try_fill_in.__doc__ = (
        f"The fill-in「{what}」: the learner's version once ``{check.__name__}`` passes, the "
        "course's while it is unwritten."
    )
    try_fill_in.checker = check.__name__  # the name its passing is recorded under (tracking)
    return try_fill_in


# -- inside a rank: every torch.distributed call watched, by replacing the functions' code ------------------
#
# Replacing ``dist.all_reduce`` on the module is not enough: a function imported by name (``from
# torch.distributed import all_reduce``, at the top of a cell, arrives in the rank as a reference to the same
# function object), an alias, ``torch.distributed.distributed_c10d.all_reduce`` and torch's own internals all
# hold the function object itself. So the object's ``__code__`` is replaced in place: every name and import
# path that reaches it runs the watcher, and the original body is kept in a copy that the watcher calls.

P2P_CALLS = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
COLLECTIVE_CALLS = (
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "all_reduce_coalesced",
    "all_gather_coalesced",
)
DIST_CALLS = P2P_CALLS + COLLECTIVE_CALLS
SENDS = ("dist.send", "dist.isend", "batch:isend")  # how the recorded calls name a message out ...
RECVS = ("dist.recv", "dist.irecv", "batch:irecv")  # ... and in


def _code_with(freevars: tuple, body: str):
    """A code object ``f(*args, **kwargs)`` running ``body`` (one line), with exactly ``freevars`` as free
    variables, so that it can replace the code of any function with that closure (decorated ones too)."""
    names = ", ".join(freevars)
    touch = f"        ({names},)\n" if freevars else ""
    ns: dict = {}
    source = f"def outer({names}):\n    def f(*args, **kwargs):\n{touch}        {body}\n    return f\n"
    # A file name under mgpu_helpers/checks/: a stack through the watcher reads as the course's frames.
    exec(compile(source, "mgpu_helpers/checks/core.py (watcher)", "exec"), ns)
    return ns["outer"](*([None] * len(freevars))).__code__


class SwappedCode:
    """Replace the code of function objects in place (every alias and import path of the object runs the new
    code), and put the old code back with :meth:`restore`. Swaps nest (a watcher inside a watcher): each
    keeps the code it found, under a key of its own."""

    _count = itertools.count()

    def __init__(self):
        self._saved = []

    def refuse(self, target, message: str) -> None:
        """Calling ``target`` raises ``PermissionError(message)``."""
        key = f"_MGPU_REFUSED_{next(self._count)}"
        target.__globals__[key] = message
        self._swap(target, f"raise PermissionError({key})")

    def hook(self, target, hook) -> None:
        """``target(*args, **kwargs)`` becomes ``hook(original, args, kwargs)``; ``original`` runs the old code."""
        original = types.FunctionType(
            target.__code__, target.__globals__, target.__name__, target.__defaults__, target.__closure__
        )
        original.__kwdefaults__ = target.__kwdefaults__
        key = f"_MGPU_HOOK_{next(self._count)}"
        target.__globals__[key] = lambda args, kwargs: hook(original, args, kwargs)
        self._swap(target, f"return {key}(args, kwargs)")

    def _swap(self, target, body: str) -> None:
        code = getattr(target, "__code__", None)
        if code is None:
            raise TypeError(f"{target!r} is not a Python function: its code cannot be replaced")
        self._saved.append((target, code))
        target.__code__ = _code_with(code.co_freevars, body)

    def restore(self) -> None:
        for target, code in reversed(self._saved):
            target.__code__ = code
        self._saved.clear()
        # (the keys stay in the module's globals: a copy of the old code may still be running, and each is small)


def _numel(x):
    if isinstance(x, (list, tuple)):
        parts = [_numel(t) for t in x]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return int(x.numel()) if hasattr(x, "numel") else None


def _nbytes(x) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return int(x.numel() * x.element_size()) if hasattr(x, "element_size") else 0


class DistCall(tuple):
    """One call the learner's code made: ``(name, peer, numel)`` as a tuple, plus ``.nbytes`` (of the first
    tensor argument), ``.numels`` (elements of each positional argument, None where not a tensor),
    ``.async_op``. ``name`` is ``dist.<function>``, or ``batch:isend`` / ``batch:irecv`` for each operation of a
    ``batch_isend_irecv``; ``peer`` is the dst / src of point-to-point calls, else None."""

    def __new__(cls, name, peer, numel, nbytes=0, numels=(), async_op=False):
        self = super().__new__(cls, (name, peer, numel))
        self.nbytes, self.numels, self.async_op = nbytes, tuple(numels), bool(async_op)
        return self

    def __reduce__(self):
        return DistCall, (self[0], self[1], self[2], self.nbytes, self.numels, self.async_op)

    name = property(operator.itemgetter(0))
    peer = property(operator.itemgetter(1))
    numel = property(operator.itemgetter(2))


def _peer_of(name, args, kwargs):
    key = "dst" if "send" in name else "src"
    return args[1] if len(args) > 1 else kwargs.get(key, kwargs.get(f"group_{key}"))


class WatchedCalls:
    """Inside a rank, around the learner's code: the ``torch.distributed`` functions watched, some refused.

    - every function of :data:`DIST_CALLS` (and ``init_process_group`` with ``watch_init``) has its code
      replaced (:class:`SwappedCode`), so it is watched under any name or import path it is reached by;
    - ``calls`` lists a :class:`DistCall` for each call the learner's code made (torch's own nested calls,
      such as ``send`` using ``isend``, are not counted twice; a ``batch_isend_irecv`` adds one entry per
      operation); ``inits`` the keyword names and positional values of each ``init_process_group``;
    - ``refuse``: function names whose call raises ``PermissionError("EXERCISE_FORBIDDEN dist.<name>")``;
      ``course``: ``[(function object, label)]`` of the course's own code or the checker's reference, which
      raise ``PermissionError("EXERCISE_COURSE_CODE <label>")`` (:func:`rank_failure` names both);
    - ``on_call(call, result) -> result``: called after each counted call (e.g. to wrap a Work handle).

    Use as a context manager (``with WatchedCalls(...) as watched:``); leaving it puts the code back.
    """

    def __init__(self, refuse=(), course=(), on_call=None, watch_init: bool = False):
        self.refuse, self.course, self.on_call, self.watch_init = set(refuse), list(course), on_call, watch_init
        self.calls: list = []
        self.inits: list = []
        self._depth = 0
        self._swapped = SwappedCode()

    def __enter__(self):
        import torch.distributed.distributed_c10d as c10d

        for name in DIST_CALLS:
            target = getattr(c10d, name, None)
            if getattr(target, "__code__", None) is not None:
                self._swapped.hook(target, self._watcher(name))
        if self.watch_init:
            self._swapped.hook(c10d.init_process_group, self._init_watcher)
        for target, label in self.course:
            target = _inner(target)
            if getattr(target, "__code__", None) is not None:
                self._swapped.refuse(target, f"EXERCISE_COURSE_CODE {label}")
        return self

    def __exit__(self, *exc):
        self._swapped.restore()
        return False

    def _watcher(self, name):
        def watcher(original, args, kwargs):
            outer = self._depth == 0
            if outer:
                if name in self.refuse:
                    raise PermissionError(f"EXERCISE_FORBIDDEN dist.{name}")
                self._record(name, args, kwargs)
            self._depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if outer and self.on_call is not None:
                result = self.on_call(self.calls[-1], result)
            return result

        return watcher

    def _record(self, name, args, kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        peer = _peer_of(name, args, kwargs) if name in ("send", "recv", "isend", "irecv") else None
        self.calls.append(
            DistCall(
                f"dist.{name}",
                peer,
                _numel(first),
                _nbytes(first),
                [_numel(a) for a in args],
                kwargs.get("async_op", False),
            )
        )
        if name == "batch_isend_irecv":
            for op in args[0] if args else kwargs.get("p2p_op_list", []):
                kind = "isend" if "send" in getattr(op.op, "__name__", "") else "irecv"
                self.calls.append(
                    DistCall(f"batch:{kind}", op.peer, _numel(op.tensor), _nbytes(op.tensor), [_numel(op.tensor)], True)
                )

    def _init_watcher(self, original, args, kwargs):
        plain = (str, int, float, type(None))
        self.inits.append(
            {k: (v if isinstance(v, plain) else repr(v)) for k, v in kwargs.items()}
            | {"_args": [a if isinstance(a, plain) else repr(a) for a in args]}
        )
        return original(*args, **kwargs)


def call_label(name: str) -> str:
    """A recorded call's name as the learner wrote it: ``batch:isend`` is an isend inside ``batch_isend_irecv``."""
    return f"dist.batch_isend_irecv 里的 {name[6:]}" if name.startswith("batch:") else name


def refuse_calls(calls_by_rank, names, what: str, why: str) -> None:
    """Raise :class:`CheckFailed` when a rank called one of ``names`` (an exercise's rule, checked on the calls):
    the first recorded call whose function is one of them."""
    for rank, calls in enumerate(calls_by_rank):
        for call_ in calls:
            if call_[0].split(".")[-1].split(":")[-1] in names:
                raise CheckFailed(f"{what}：rank {rank} 调用了 {call_label(call_[0])}。{why}")


# -- launching the learner's code on ranks: a hang or an error, told in the learner's terms ---------------

# How long the checked work may run once every rank has joined the process group (start-up is not counted:
# ``run_ranks`` starts the clock when the last rank is in). Measured on the 2-core course machine shared with
# other work: a whole checker launch (forking, joining, the checked work, the result back) takes 0.7-1.0 s
# for the point-to-point, collective and semantics checks on 2-4 ranks, so the checked work itself is well
# under a second; 4 s is a margin of several times it, and an answer that never ends is reported within
# seconds (tests/checks/test_checks_core.py holds every rank-launching checker to that).
HANG_S = 4.0


# Checkers whose ranks train a model (an optimizer's first step imports torch._dynamo): twice the limit.
TRAIN_HANG_S = 2 * HANG_S


def where_ranks_wait(exc) -> str:
    """'rank 0 卡在 dist.send（exchange 的第 12 行）；rank 1 ...' from a :class:`RankTimeout`'s stacks: per rank,
    the torch.distributed call it is blocked in and the line of the learner's code that made it."""
    import re

    parts = []
    for rank in sorted(set(exc.stacks) | set(exc.waiting_in)):
        call_ = (exc.waiting_in.get(rank) or "").split(" ")[0]
        where = ""
        for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", exc.stacks.get(rank, "")):
            if "mgpu_helpers/launcher/rank_process.py" not in block:
                continue
            if not call_:
                found = re.findall(r'torch/distributed/[^"]*", line \d+ in ([a-z]\w*)', block)
                call_ = f"dist.{found[0]}" if found else ""
            for path, line, func in re.findall(r'File "([^"]*)", line (\d+) in (\w+)', block):
                if "torch/" in path or path.startswith("<frozen") or "runpy" in path:
                    continue
                if "mgpu_helpers/" in path:
                    if not call_ and "mgpu_helpers/checks/" in path:
                        # Blocked in a request's wait(): a C++ call, so no torch.distributed frame on the stack.
                        call_ = "request.wait()（等返回的请求完成）"
                    continue
                where = f"（{func} 的第 {line} 行）"
                break
        parts.append(f"rank {rank} 卡在 {call_ or '（不在 torch.distributed 调用里，像是死循环）'}{where}")
    return "；".join(parts)


def hang_failure(exc, what: str, world_size: int, timeout: float, advice: str = "") -> CheckFailed:
    """The learner-facing failure for a :class:`RankTimeout`: how long, where each rank waits, what to check."""
    advice = advice or (
        "检查：每个 send 在对方都有一个 recv 对应（对方是不是那个 rank，长度是否一样）；"
        "如果每个 Rank 都先做同一件事（都先 send，或者都先 recv），等待就会连成一个圈。"
    )
    return CheckFailed(
        f"{what}：{world_size} 个 Rank 过了 {timeout:g} 秒还没有结束——死锁了，或者收发没有配对。"
        f"{where_ranks_wait(exc) or '没有 Rank 停在 torch.distributed 调用里'}。{advice}"
    )


def launch(
    rank_fn,
    world_size: int,
    args,
    what: str,
    fn,
    timeout: float = HANG_S,
    advice: str = "",
    init: bool = True,
    backend: str = "auto",
    rule: str = "",
    **kwargs,
):
    """``run_ranks(rank_fn, world_size, args)`` for a checker: the values in rank order. A hang becomes
    :func:`hang_failure` (``advice``: what to check), an error in the learner's ``fn`` :func:`rank_failure`
    (``rule``: what the exercise allows); both are :class:`CheckFailed`."""
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks

    try:
        return run_ranks(
            rank_fn,
            world_size,
            args=tuple(args),
            timeout=timeout,
            stream=False,
            quiet=True,
            init=init,
            backend=backend,
            **kwargs,
        ).values
    except RankTimeout as exc:
        raise hang_failure(exc, what, world_size, timeout, advice) from None
    except RankError as exc:
        raise rank_failure(exc, fn, what, rule) from None


# -- ranks --------------------------------------------------------------------------------------------------


def course_object(name: str):
    """The object a dotted name names (``"mgpu_helpers.lessons.p2p.exchange"``), its module imported now."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def resolve_course(course) -> list:
    """``[(function object, label)]`` for ``course``: function objects, or dotted names resolved now
    (``"mgpu_helpers.lessons.p2p.exchange"``); names that do not resolve are left out."""
    out = []
    for item in course:
        if isinstance(item, str):
            try:
                out.append((course_object(item), item.replace("mgpu_helpers.", "mh.")))
            except (ImportError, AttributeError):  # a name that does not resolve is left out
                continue
        elif item is not None:
            label = f"{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', name_of(item))}"
            out.append((item, label.replace("mgpu_helpers.", "mh.")))
    return out


def rank_tensor(values, dtype: str = "float32"):
    """``values`` as a tensor of ``dtype`` (a torch dtype's name) on this rank's device."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    return torch.tensor(np.asarray(values), dtype=getattr(torch, dtype), device=rank_device())


def as_numpy(t):
    """A tensor a rank's code returned, as NumPy (on the CPU); anything else as it is."""
    import torch

    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t


def _rank_main(rank, world_size, fn, inputs, extra, forbid, dtype, joined=True, course=()):
    """Rank function of the checkers: build this rank's tensor, call the reader's ``fn`` on it, watched
    (:class:`WatchedCalls`: ``forbid`` and the ``course`` code refuse to run, under any name).

    ``joined=False``: the reader's ``fn`` joins the process group itself and must leave it before returning.
    """
    import torch.distributed as dist

    with WatchedCalls(refuse=forbid, course=course):
        out = fn(rank, world_size, rank_tensor(inputs[rank], dtype), *extra)
    if not joined and dist.is_initialized():
        raise RuntimeError("EXERCISE_NOT_LEFT the process group is still up when fn returned")
    return as_numpy(out)


def run_on_ranks(
    fn,
    what: str,
    world_size: int,
    inputs,
    extra=(),
    forbid=(),
    dtype="float32",
    timeout=HANG_S,
    init: bool = True,
    course=(),
):
    """Run ``fn(rank, world_size, x, *extra)`` on ``world_size`` ranks; returns the values in rank order.

    ``forbid``: ``torch.distributed`` function names ``fn`` may not call; ``course``: the course's code and
    the checker's reference (objects or dotted names), which may not be called either. ``init=False``: the
    ranks start without a process group; ``fn`` joins it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
    MGPU_BACKEND are set) and must leave it again.
    """
    course = resolve_course(course)
    refuse_course_code(fn, what, [obj for obj, _label in course])
    return launch(
        _rank_main,
        world_size,
        (fn, inputs, tuple(extra), tuple(forbid), dtype, init, course),
        what,
        fn,
        timeout,
        init=init,
    )


def rank_failure(exc, fn, what: str, rule: str = "") -> CheckFailed:
    """The learner-facing failure for a :class:`~mgpu_helpers.RankError` raised by the learner's ``fn``:
    "not done yet" for the stub, the exercise's own rules (forbidden calls, the course's code, a group left
    open), else the rank, the exception type and its first line. ``rule``: what the exercise allows, for the
    message of a forbidden call."""
    if is_stub_error(exc):
        return not_done(fn, what)
    text = str(exc)

    def named(tag: str) -> str:  # the name after the watcher's tag in the message
        return text.split(f"{tag} ")[1].split()[0].rstrip("'\".,")

    if "EXERCISE_NOT_LEFT" in text:
        return CheckFailed(
            f"{what}：rank {exc.rank} 返回时进程组还开着。最后要调用 "
            "dist.destroy_process_group()，让这个进程离开进程组。"
        )
    if "EXERCISE_COURSE_CODE" in text:
        return CheckFailed(
            f"{what}：rank {exc.rank} 调用了课程自己的 {named('EXERCISE_COURSE_CODE')}——这是课程自己的实现"
            "（或检查用的参考答案），不算你写的代码（换个名字或从别处 import 也一样）。在你的单元格里自己写出来。"
        )
    if "EXERCISE_FORBIDDEN" in text:
        name = named("EXERCISE_FORBIDDEN")
        if rule:
            return CheckFailed(
                f"{what}：这个练习只许用 {rule}，rank {exc.rank} 调用了 {name}（换个名字或从别处 import 也算）。"
            )
        return CheckFailed(
            f"{what}：这个练习要求自己用点对点通信实现，不能直接调用 {name}（rank {exc.rank}；"
            "换个名字或从别处 import 也算）。"
        )
    return CheckFailed(f"{what}：rank {exc.rank} 出错了（{exc.exc_type}）：{text.splitlines()[0]}")


def int_values(rng, shape) -> np.ndarray:
    """Random small whole numbers as float32: sums are exact in any order, and messages stay readable."""
    return rng.integers(-50, 51, size=shape).astype(np.float32)


def new_rng():
    return np.random.default_rng()


def which_rank(got, inputs) -> str:
    """' (那是 rank k 的数据)' when ``got`` equals one rank's input, else ''."""
    return next(
        (
            f"（那正是 rank {k} 的输入）"
            for k, inp in enumerate(inputs)
            if got is not None and np.shape(got) == np.shape(inp) and np.allclose(got, inp)
        ),
        "",
    )


# -- one problem shape for the checkers that launch ranks ----------------------------------------------------


@dataclass(frozen=True)
class RankCase:
    """One drawn case of a :class:`RankProblem`: the inputs of every rank and what each rank must return."""

    world_size: int
    inputs: list
    extra: tuple
    expected: list


@dataclass(frozen=True)
class RankProblem:
    """An exercise that runs the reader's ``fn(rank, world_size, x, *extra)`` on ranks (one row of a table).

    - ``name``: the reader's function, as the messages call it; ``what``: what it must do (one sentence);
    - ``make_case(rng, world_size) -> (inputs, extra)``: fresh random inputs, one per rank, and extra args;
    - ``reference(inputs, extra, world_size) -> [expected value of each rank]``;
    - ``explain(case, rank, got) -> str``: a hint for a wrong answer ('' for none); it may also raise
      :class:`CheckFailed` itself for a more precise message;
    - ``where(case, rank) -> str``: how a failure names the case (default: world size and rank);
    - ``forbid``: ``torch.distributed`` names the reader may not call; ``course``: the course's code and the
      checker's reference (objects or dotted names), refused by name before the run and in the ranks; ``init=False``: ``fn`` joins and leaves
      the process group itself; ``world_sizes``: the sizes run by default; ``done``: the pass line, with
      ``{sizes}`` for the world sizes run.
    """

    name: str
    what: str
    make_case: Callable
    reference: Callable
    done: str
    explain: Callable | None = None
    where: Callable | None = None
    forbid: tuple = ()
    course: tuple = ()
    init: bool = True
    world_sizes: tuple = WORLD_SIZES
    dtype: str = "float32"


def run_problem(problem: RankProblem, fn, world_sizes=None, timeout: float = HANG_S) -> list[RankCase]:
    """Run ``fn`` on every world size of ``problem``, compare each rank with the reference, explain a miss.

    Prints the pass line and returns the cases run; raises :class:`CheckFailed` naming the world size, the
    rank and the element at the first difference.
    """
    rng = new_rng()
    sizes = tuple(world_sizes or problem.world_sizes)
    if not sizes or any(int(w) != w or w < 1 for w in sizes):
        raise ValueError(f"world_sizes must be whole numbers >= 1, got {world_sizes!r}")
    where = problem.where or (lambda case, rank: f"world_size = {case.world_size}，rank {rank}")
    cases = []
    for world_size in sizes:
        inputs, extra = problem.make_case(rng, world_size)
        case = RankCase(world_size, inputs, tuple(extra), problem.reference(inputs, tuple(extra), world_size))
        got = run_on_ranks(
            fn,
            problem.what,
            world_size,
            inputs,
            case.extra,
            problem.forbid,
            problem.dtype,
            timeout,
            init=problem.init,
            course=problem.course,
        )
        for rank in range(world_size):
            hint = problem.explain(case, rank, got[rank]) if problem.explain else ""
            compare(got[rank], case.expected[rank], where(case, rank), hint)
        cases.append(case)
    passed(problem.done.format(sizes=", ".join(map(str, sizes))))
    return cases
