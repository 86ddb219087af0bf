"""What a failed check is (:class:`CheckFailed`, its message in Chinese), and how an exercise still unwritten is
told apart from a wrong one: a lesson's generated stub holds :data:`STUB_MARK` and raises ``NotImplementedError``,
which the checkers turn into the failure :func:`not_done`, whose message starts with :data:`NOT_DONE`."""

import sys
import traceback
import types

NOT_DONE = "这个练习还没有完成"
STUB_MARK = "练习：补全这里"


class CheckFailed(AssertionError):
    """A checker found something wrong; in IPython it shows as its message alone, not as a traceback through the
    checkers' code (IPython's ``_render_traceback_`` hook); :func:`show_trace` prints the whole traceback."""

    def _render_traceback_(self):
        return [
            "\x1b[1;31m检查没有通过\x1b[0m",
            *str(self).splitlines(),
            "",
            "（想看检查是在哪一步发现的：运行 mh.checks.show_trace()）",
        ]


def show_trace() -> None:
    """Print the whole traceback of the last error a notebook cell raised (IPython keeps it in ``sys.last_value``)."""
    if (exc := getattr(sys, "last_value", None)) is None:
        print("还没有出错的单元格。")
    else:
        traceback.print_exception(exc)


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
    """True while ``fn`` (a function, a Numba kernel, or a class: one of its methods) holds the stub's text."""
    if isinstance(fn, type):
        return any(has_stub(method) for method in vars(fn).values() if callable(method))
    code = getattr(_inner(fn), "__code__", None)
    return any(isinstance(const, str) and STUB_MARK in const for c in _code_objects(code) for const in c.co_consts)


def require_written(fn, what: str) -> None:
    """Raise the "not done yet" failure while ``fn`` still holds the generated stub."""
    if has_stub(fn):
        raise not_done(fn, what)
