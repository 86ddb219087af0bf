"""Is this the course's code? One rule: the course's own code (the exercise's implementation in mh.lessons, the
checker's reference, the ``models``, ``widgets`` and ``checks`` that compute what exercises ask for) is not the
learner's answer, whether their function *is* it or *calls* it by any path (an alias, a wrapper or helper of theirs,
a course function that calls on, ``getattr`` with a built name). The checker itself may still use its reference.

The rule is asked at two moments, each catching what the other cannot see: before the run
:func:`refuse_course_code` reads the code (what it and its helpers reach, a base class, a Numba kernel's body, a
branch no drawn case takes); while it runs :func:`refusing` watches the calls (a ``sys.setprofile`` hook; in a rank
through :class:`~.watch.WatchedCalls`) and names a refused function under the name the learner used."""

import contextlib
import importlib
import os
import sys
import sysconfig
import types

from .failure import CheckFailed, _code_objects, _inner, name_of

COURSE_PACKAGES = ("mgpu_helpers.lessons", "mgpu_helpers.checks")
_NOT_LEARNER = ("mgpu_helpers", "torch", "numpy", "numba", "cupy", "builtins", "math", "functools", "itertools")


def _in_packages(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _import(name: str):
    """The module ``name``, or None for a module the machine lacks (the run will say so)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _attribute(obj, name: str):
    """``obj.name``, else the submodule ``obj.name`` not imported yet (None: neither is there)."""
    try:
        return getattr(obj, name)
    except AttributeError:
        return _import(f"{obj.__name__}.{name}")


def _names_reached(fn):
    """``(dotted name, object)`` for everything ``fn``'s code reaches by name: globals and builtins, attribute
    chains through modules and classes, imports inside the function, closure cells and default values."""
    import builtins
    import dis

    inner = _inner(fn)
    if (code := getattr(inner, "__code__", None)) is None:
        return
    scope = getattr(inner, "__globals__", {})
    cells = {}  # the closure's filled cells
    for cell_name, cell in zip(code.co_freevars, inner.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            cells[cell_name] = cell.cell_contents
    yield from cells.items()
    kwdefaults = getattr(inner, "__kwdefaults__", None) or {}
    yield from (("默认参数", v) for v in (getattr(inner, "__defaults__", None) or ()) + tuple(kwdefaults.values()))
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
                # (only modules and classes are read further: a chain through an instance ends here)
                obj = _attribute(obj, ins.argval) if isinstance(obj, (types.ModuleType, type)) else None
                chain = f"{chain}.{ins.argval}"
                continue
            if op in ("PRECALL", "CACHE", "EXTENDED_ARG", "PUSH_NULL"):
                continue
            if obj is not None:  # the chain ends here: what it names is what is used
                yield chain, obj
            chain, obj = None, None
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                chain, obj = ins.argval, scope.get(ins.argval, getattr(builtins, ins.argval, None))
            elif op in ("LOAD_FAST", "LOAD_DEREF") and ins.argval in local:
                chain, obj = ins.argval, local[ins.argval]
            elif op == "LOAD_DEREF" and ins.argval in cells:
                chain, obj = ins.argval, cells[ins.argval]
            elif op == "IMPORT_NAME" and (base := _import(ins.argval)) is not None:
                imported = base
                yield ins.argval, base
            elif op == "IMPORT_FROM" and base is not None:
                value = _attribute(base, ins.argval)
                if value is not None:  # (an attribute that is None is nothing the learner could call)
                    imported = value
                    yield f"{base.__name__}.{ins.argval}", value
        if obj is not None:
            yield chain, obj


def _label(obj, name: str | None = None) -> str:
    """How a message names the course's ``obj``, with ``name`` when the learner's code calls it by another."""
    name = name.replace("mgpu_helpers", "mh", 1) if name else name
    module = getattr(obj, "__name__", "") if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    qual = getattr(obj, "__qualname__", None)
    full = (f"{module}.{qual}" if qual and module else module or name or repr(obj)).replace("mgpu_helpers", "mh", 1)
    return full if name in (None, full, qual) or full.endswith("." + name) else f"{full}（你的代码里叫 {name}）"


def code_names(fn) -> set[str]:
    """Every global and attribute name the code of ``fn`` (a Numba kernel, a wrapper) and its inner functions use."""
    return {name for c in _code_objects(getattr(_inner(fn), "__code__", None)) for name in c.co_names}


def course_code_reached(fn, references=(), packages=(), names=(), depth: int = 4) -> str | None:
    """The name under which ``fn`` is, or reaches, the course's own code: ``references`` (by identity: a lesson's cell
    is the source of mh.lessons, so the same code defined again in a cell is not refused), anything defined in
    ``packages``, ``names`` wherever the code uses them (``model.memory_plan(...)``); ``None`` when it does not. The
    learner's own helpers and classes it reaches are followed ``depth`` levels deep (their methods too)."""
    references = tuple(r for r in references if r is not None)

    def ours(obj) -> bool:
        try:
            if any(obj is r or _inner(obj) is _inner(r) for r in references):
                return True
        except Exception:
            return False
        if isinstance(obj, types.ModuleType):
            return _in_packages(obj.__name__, packages)
        return callable(obj) and _in_packages(getattr(obj, "__module__", "") or "", packages)

    if ours(fn):
        return _label(fn)
    todo, seen = [(fn, 0)], set()
    while todo:
        f, d = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        members = [f]
        if isinstance(f, type):  # a class the learner wrote: its bases and its methods
            if base := next((b for b in f.__mro__[1:] if b is not object and ours(b)), None):
                return f"{_label(base)}（{f.__name__} 的基类）"
            members = [
                v.__func__ if isinstance(v, (staticmethod, classmethod)) else getattr(v, "fget", v)
                for v in vars(f).values()
            ]
        for member in members:
            if hit := sorted(code_names(member) & set(names)):
                return hit[0]
            for name, obj in _names_reached(member):
                if ours(obj):
                    return _label(obj, name)
                # a function or class the learner wrote (not the course's, not a library's): followed too
                learners = not _in_packages(getattr(obj, "__module__", "") or "", _NOT_LEARNER)
                if d < depth and learners and (callable(obj) or isinstance(obj, type)):
                    todo.append((obj, d + 1))
    return None


def course_code_failure(what: str, label: str, advice: str = "", fn=None) -> CheckFailed:
    """The one message for the course's code ``label`` in an answer: read in ``fn``, or caught being called."""
    who = f"`{name_of(fn)}` 用到了" if fn is not None else "调用了"
    return CheckFailed(
        f"{what}：{who}课程自己的 {label}——这是课程自己的实现（或检查用的参考答案），不算你写的代码。"
        f"{advice or '在你的单元格里自己写出来。'}"
    )


def refuse_course_code(fn, what: str, references=(), packages=(), advice: str = "", names=()) -> None:
    """Raise :class:`CheckFailed` when ``fn`` is, or reaches, the course's own code (:func:`course_code_reached`).
    While a guard runs (:func:`refusing`), ``references`` are refused for the rest of the check at run time too."""
    if name := course_code_reached(fn, references, packages, names):
        raise course_code_failure(what, name, advice, fn)
    if _guards:
        _guards[-1].update(_refused_code(references))


# -- the rule while the check runs: a profile hook on the calls ------------------------------------------------
_LIBRARIES = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
_CHECKERS = os.path.join("mgpu_helpers", "checks", "")
_GUARDED = tuple(os.path.join("mgpu_helpers", part, "") for part in ("models", "widgets", "checks"))
_guards: list[dict] = []  # the refused code of each running guard, innermost last: code object -> label


def _learners(path: str) -> bool:
    """A frame of the learner's code (a notebook cell, a file of theirs): not a library's, not the course's."""
    return not (path.startswith(_LIBRARIES) or "mgpu_helpers" in path or path.startswith("<frozen"))


def _called_for_the_learner(frame) -> bool:
    """True when a frame of the learner's code (their function, a wrapper of theirs, a course function they called)
    runs between ``frame`` and the checker: the checker's own use of its reference has none."""
    while frame is not None:
        path = frame.f_code.co_filename
        if _CHECKERS in path and not path.endswith("(watcher)"):
            return False
        if _learners(path):
            return True
        frame = frame.f_back
    return False


def _refused_code(references) -> dict:
    """``{code object: label}`` of the course's functions: refused by their code, what aliases and wrappers share."""
    out = {}
    for obj in map(_inner, references):
        code = getattr(obj, "__code__", None)
        if code is not None and _in_packages(getattr(obj, "__module__", "") or "", ("mgpu_helpers",)):
            out[code] = _label(obj)
    return out


def _name_used(caller, code) -> str | None:
    """The name under which the learner's frame ``caller`` holds the function of ``code`` (an alias), if any."""
    for scope in (caller.f_locals, caller.f_globals):
        for name, value in list(scope.items()):
            try:
                if getattr(_inner(value), "__code__", None) is code:
                    return name
            except Exception:  # an object whose attributes cannot be read is not the function
                continue
    return None


@contextlib.contextmanager
def refusing(what: str, references=(), advice: str = "", packages: bool = True, failure=None):
    """While the learner's code runs for a check, a call from it into the course's code raises ``failure(label)``:
    ``references`` when a frame of the learner's code runs between the call and the checker, and with ``packages``
    any function of the course's ``models``, ``widgets`` and ``checks`` the learner's code calls directly. Guards
    nest. A refusal the learner's code caught still fails the check when the guard ends."""
    refused = _refused_code(references)
    before = sys.getprofile()
    raised = []

    def profile(frame, event, arg):
        if before is not None:
            before(frame, event, arg)
        if event != "call":
            return
        code, caller = frame.f_code, frame.f_back
        if code in refused:
            if not _called_for_the_learner(caller):
                return  # the checker's own use of its reference
            label = refused[code]
        elif (
            packages
            and caller is not None
            and any(g in code.co_filename for g in _GUARDED)
            # a module's own function: not a method of an object the checker handed over (the answer's
            # ``limits.max_warps_per_sm``), nor a watcher or a signal handler (defined inside a function)
            and "." not in code.co_qualname
            and _learners(caller.f_code.co_filename)
        ):
            label = f"{frame.f_globals.get('__name__', '')}.{code.co_qualname}".replace("mgpu_helpers", "mh", 1)
        else:
            return
        name = _name_used(caller, code) if caller is not None and _learners(caller.f_code.co_filename) else None
        if name and name != code.co_name:
            label += f"（你的代码里叫 {name}）"
        raised.append(failure(label) if failure else course_code_failure(what, label, advice))
        raise raised[-1]

    _guards.append(refused)
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(before)
        _guards.pop()
    if raised:
        raise raised[0]


def course_object(name: str):
    """The object a dotted name (``"mgpu_helpers.lessons.p2p.exchange"``) names, its module imported now."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def resolve_course(course) -> list:
    """The objects of ``course``: objects, or dotted names resolved now (None, or a name unresolved: left out)."""
    out = []
    for item in course:
        if isinstance(item, str):
            with contextlib.suppress(ImportError, AttributeError):  # a name that does not resolve is left out
                out.append(course_object(item))
        elif item is not None:
            out.append(item)
    return out
