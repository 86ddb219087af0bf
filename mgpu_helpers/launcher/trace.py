"""Per-rank spans (``with mh.trace.span("communicate", "all_reduce"): ...``): what each rank was doing when, cheap
enough to leave on; ``run_ranks`` brings them back in ``RankResults.spans[rank]``. Times come from
``time.monotonic()``, one clock for every process of the machine, so spans of different ranks line up. On a GPU,
call ``torch.cuda.synchronize()`` inside the span you time: CUDA work is asynchronous."""

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

KINDS = ("compute", "communicate", "wait", "other")


@dataclass(frozen=True)
class Span:
    """One interval of one rank: ``kind`` is one of KINDS, ``name`` free text, times in seconds."""

    kind: str
    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


_spans: list[Span] = []
_range_hook = None  # label -> context manager, opened around every span (a profiler's named range)


def set_range_hook(hook) -> None:
    """Open ``hook(label)`` (a context manager) around every later :func:`span` of this process; None: stop."""
    global _range_hook
    _range_hook = hook


@contextmanager
def span(kind: str, name: str = ""):
    """Record the time spent in the ``with`` block as a span of this rank."""
    if kind not in KINDS:
        raise ValueError(f"span kind must be one of {KINDS}, not {kind!r}")
    hook = _range_hook
    with hook(f"mgpu.{kind}:{name or kind}") if hook else nullcontext():  # the clock runs inside a profiler's range
        start = time.monotonic()
        try:
            yield
        finally:
            _spans.append(Span(kind, name or kind, start, time.monotonic()))


def record(kind: str, start: float, end: float, name: str = "") -> None:
    """Add a span measured elsewhere (times from ``time.monotonic()``)."""
    if kind not in KINDS:
        raise ValueError(f"span kind must be one of {KINDS}, not {kind!r}")
    _spans.append(Span(kind, name or kind, start, end))


def latest() -> Span:
    """The span this process recorded last (what a ``with span(...)`` block just measured)."""
    return _spans[-1]


def snapshot() -> list[Span]:
    """This process's spans so far, without forgetting them (``collect`` still returns them)."""
    return list(_spans)


def collect() -> list[Span]:
    """Return and forget this process's spans."""
    out = list(_spans)
    _spans.clear()
    return out
