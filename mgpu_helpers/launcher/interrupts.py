"""Holding back the notebook's interrupt while the launcher changes state that must not be left half-done.

Jupyter's "interrupt" is a SIGINT to the kernel, turned into KeyboardInterrupt in the main thread at
whatever bytecode it happens to be running. Landing between "job sent" and "reply read" it would leave the
server's reply unread (every later launch would read the previous job's answer); landing between "pipe
created" and "pipe recorded" it would leak or double-close a file descriptor; landing in the clean-up it
would leave ranks, descriptors or the job's folder behind. So ``run_ranks`` runs with the interrupt held
back (:func:`interrupts_held`) and lets it through only while it supervises the ranks
(:meth:`Gate.allowed`), where every resource already has exactly one owner; an interrupt that came while it
was held is raised as soon as the state is whole again.
"""
from __future__ import annotations

import contextlib
import signal
import threading


class Gate:
    """The SIGINT handler of a held block: records interrupts, and lets them through on request."""

    def __init__(self, previous) -> None:
        self.previous = previous          # the handler outside (Python's default raises KeyboardInterrupt)
        self.held: list = []

    def hold(self, signum, frame) -> None:
        self.held.append(frame)

    def raise_held(self) -> None:
        """Deliver an interrupt that was held back, the way the handler outside would have."""
        if self.held:
            frame = self.held[0]
            self.held.clear()
            self.previous(signal.SIGINT, frame)

    @contextlib.contextmanager
    def allowed(self):
        """Within a held block: interrupts raise again here (one held back so far is raised at once)."""
        signal.signal(signal.SIGINT, self.previous)
        try:
            self.raise_held()
            yield
        finally:
            signal.signal(signal.SIGINT, self.hold)


class _Open(Gate):
    """Where nothing can be held (not the main thread, or SIGINT not handled in Python)."""

    @contextlib.contextmanager
    def allowed(self):
        yield


@contextlib.contextmanager
def interrupts_held():
    """Within the block a SIGINT is recorded instead of raised; it is raised (as before) when the block ends.

    Yields a :class:`Gate`. Only the main thread receives Python signal handlers, so elsewhere this holds
    nothing back; where SIGINT is ignored or has its default action there is nothing to hold back either.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield _Open(previous)
        return
    gate = Gate(previous)
    # From here on a SIGINT reaches the gate, never `previous`: the swap itself cannot be interrupted
    # half-way (a SIGINT before it raises before anything was done; one after it is recorded).
    signal.signal(signal.SIGINT, gate.hold)
    try:
        yield gate
    finally:
        signal.signal(signal.SIGINT, previous)
        gate.raise_held()
