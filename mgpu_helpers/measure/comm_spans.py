"""Spans of collectives from issue to completion, on every rank: an async collective returns at once, and its
real end is what overlap is about. Inside :func:`recording` each collective of :data:`TIMED_OPS` records a
``communicate`` span ``"<op> <bytes>"``, whatever the caller does with its handle: on CPU tensors (gloo) by a
callback on the work's future, which gloo's thread runs at completion; on CUDA tensors (NCCL), whose future
completes on the stream and not on the host, by a thread polling ``work.is_completed()`` every 0.2 ms; where gloo's
work has no future (reduce-scatter, all-gather), at the return of ``wait()`` (an upper bound, exact for the blocking
form). Only calls through ``torch.distributed``'s attributes are seen, not a name imported before :func:`recording`."""

import threading
import time
from contextlib import contextmanager

from mgpu_helpers.launcher import trace
from mgpu_helpers.models.collectives import TORCH_FUNCTIONS

TIMED_OPS = tuple(TORCH_FUNCTIONS[name][0] for name in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"))
POLL_S = 2e-4


class _Watcher:
    def __init__(self):
        self.works: list = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mgpu-comm-spans", daemon=True)
        self.thread.start()

    def add(self, work, start: float, name: str) -> None:
        with self.lock:
            self.works.append((work, start, name))

    def _run(self) -> None:
        while not (self.stop.is_set() and not self.works):
            now = time.monotonic()
            with self.lock:
                left = []
                for work, start, name in self.works:
                    if work.is_completed():
                        trace.record("communicate", start, now, name)
                    else:
                        left.append((work, start, name))
                self.works = left
            time.sleep(POLL_S)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


class _EndsAtWait:
    """A Work without a future: its span ends when ``wait()`` returns (an upper bound of its end)."""

    def __init__(self, work, start: float, name: str):
        self._work, self._start, self._name, self._recorded = work, start, name, False

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        if not self._recorded:
            self._recorded = True
            trace.record("communicate", self._start, time.monotonic(), self._name)
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


def _wrap(op: str, original, watcher_box: list, callbacks: list):
    def collective(tensor, *args, async_op: bool = False, **kwargs):
        start = time.monotonic()
        work = original(tensor, *args, async_op=True, **kwargs)
        name = f"{op} {tensor.numel() * tensor.element_size() if hasattr(tensor, 'numel') else 0}"
        if work is None:  # this rank is not in the group
            return None
        if getattr(tensor, "is_cuda", False):
            if not watcher_box:
                watcher_box.append(_Watcher())
            watcher_box[0].add(work, start, name)
        else:
            try:
                future = work.get_future()
            except RuntimeError:  # gloo's reduce-scatter and all-gather have none: end at wait()
                work = _EndsAtWait(work, start, name)
            else:
                # Kept so that leaving recording() waits until every span is written.
                callbacks.append(future.then(lambda _f: trace.record("communicate", start, time.monotonic(), name)))
        if async_op:
            return work
        work.wait()
        return None

    collective.__name__ = op
    collective.__wrapped__ = original
    return collective


@contextmanager
def recording(ops=TIMED_OPS):
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    originals = {op: getattr(dist, op) for op in ops}
    watcher_box, callbacks = [], []
    for op, fn in originals.items():
        wrapped = _wrap(op, fn, watcher_box, callbacks)
        setattr(dist, op, wrapped)
        if getattr(c10d, op, None) is fn:
            setattr(c10d, op, wrapped)
    try:
        yield
    finally:
        for op, fn in originals.items():
            setattr(dist, op, fn)
            setattr(c10d, op, fn)
        for fut in callbacks:
            fut.wait()
        if watcher_box:
            watcher_box[0].close()
