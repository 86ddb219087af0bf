"""Time limits on the learner's Python code: an answer that never ends fails within seconds, naming where it was.

The limit is a SIGALRM timer, so it applies in the main thread only (a notebook's cells, a rank's own code).
Limits nest: one started inside another (a :func:`deadline` around several :func:`call`) arms the timer for
whichever ends first and, on leaving, puts the outer one back with the time it has left."""

import contextlib
import math
import signal
import threading
import time
import traceback

from .failure import CheckFailed, not_done

# An answer of the arithmetic fill-ins takes milliseconds; a checker whose answer does real work passes more.
CALL_LIMIT_S = 2.0


class TooLong(Exception):
    """Raised in the learner's code when a :func:`time_limit` runs out; its one argument says which limit."""


@contextlib.contextmanager
def time_limit(seconds: float, expired):
    """Stop the code run inside after ``seconds``: ``expired(exc)`` (``exc``, the :class:`TooLong`, holds the
    learner's traceback) is raised instead; an outer limit's TooLong passes through to it."""
    limit = object()
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    start = time.monotonic()
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_end = [start + outer_left if outer_left else math.inf]  # inf: no outer timer, or it has fired
    end = start + seconds

    def ring(signum, frame):
        if outer_end[0] <= end:  # the outer limit's time came first: its handler decides
            outer_end[0] = math.inf
            if callable(outer_handler):
                outer_handler(signum, frame)
            # it let the code go on: this limit still holds, for the time it has left
            signal.setitimer(signal.ITIMER_REAL, max(end - time.monotonic(), 1e-6))
            return
        raise TooLong(limit)

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left or seconds))
    try:
        yield
    except TooLong as exc:
        if exc.args[0] is not limit:
            raise
        raise expired(exc) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_end[0] < math.inf:  # the outer timer again, with what it has left (at once if that ran out)
            signal.setitimer(signal.ITIMER_REAL, max(outer_end[0] - time.monotonic(), 1e-6))


def deadline(seconds: float, what: str):
    """Stop the learner's code after ``seconds``, failing as an endless loop: several calls under one limit."""
    text = (
        f"{what}：你的函数过了 {seconds:g} 秒还没有算完（正常只要几毫秒），多半是循环没有结束"
        "（循环变量忘了改，或者条件永远成立）。"
    )
    return time_limit(seconds, lambda _exc: CheckFailed(text))


def call(fn, what: str, *args, seconds: float = CALL_LIMIT_S):
    """``fn(*args)`` for a checker: the stub is "not done yet", an answer past ``seconds`` fails naming its line."""

    def expired(exc):
        code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if code and f.filename == code.co_filename]
        where = f"，停在第 {frames[-1].lineno} 行：{frames[-1].line}" if frames and frames[-1].line else ""
        shown = ", ".join(map(repr, args))
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        return CheckFailed(
            f"{what}：{getattr(fn, '__name__', 'fn')}({shown}) 过了 {seconds:g} "
            f"秒还没有返回{where}。多半是循环没有结束（条件永远成立）：检查它在这组输入上会不会停。"
        )

    try:
        with time_limit(seconds, expired):
            return fn(*args)
    except NotImplementedError:
        raise not_done(fn, what) from None


def answers(fn, what: str, cases):
    """``(case, call(fn, what, *case))`` for each case (a tuple of ``fn``'s arguments), lazily."""
    for case in cases:
        yield case, call(fn, what, *case)
