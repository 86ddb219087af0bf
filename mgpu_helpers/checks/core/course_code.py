"""Is this the course's own code? The course's implementations and a checker's reference are not the learner's.

# -- the course's own code is not the learner's -----------------------------------------------------------
#
# One question, asked in two places. On the notebook side, before anything runs: does the learner's function
# *reach* the course's implementation (or the checker's reference) by any name, import or helper of its own?
# :func:`course_code_reached` reads the function's bytecode for that. Inside the ranks the same objects are
# also made to refuse when called (:class:`WatchedCalls`), so a path the bytecode does not show (getattr with
# a computed name, a copy stored in a list) is caught when it runs.

"""

import contextlib
import importlib
import os
import sys
import sysconfig
import types

from .failure import CheckFailed, _code_objects, _inner, name_of
from .watch import SwappedCode

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
