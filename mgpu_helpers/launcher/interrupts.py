"""Holding back the notebook's interrupts while the launcher changes state that must not be left half-done.

Jupyter's "interrupt" is a SIGINT to the kernel, turned into KeyboardInterrupt in the main thread at whatever
bytecode it happens to be running. A cell's own time limit works the same way: a SIGALRM whose Python handler
raises its own exception. Landing between "job sent" and "reply read" either would leave the server's reply
unread; between "pipe created" and "pipe recorded" it would leak a file descriptor; in the clean-up it would
leave ranks, descriptors or the job's folder behind.

So the launcher runs with every signal that has a Python handler held back (:class:`interrupts_held`: SIGINT,
and SIGALRM or any other a cell has set up), and lets them through only in its waits (:meth:`Gate.allowed`:
waiting for the rank server's ``import torch``, supervising the ranks), where every resource already has
exactly one owner. A signal that came while held is delivered, to the handler it was meant for, at the next
wait or as soon as the block ends.

The gate's own handler stays installed for the whole block, and a wait is closed again by the handler itself
before it delivers a signal: a second interrupt right behind the first can therefore never find the clean-up
unprotected.
"""

import signal
import threading
from contextlib import nullcontext

_HOLDING, _ALLOWED, _DONE = "holding", "allowed", "done"


class Gate:
    """The handler of a held block: records signals, and delivers them in :meth:`allowed` waits."""

    def __init__(self) -> None:
        self.previous: dict = {}  # signal number -> the Python handler outside the block
        self.pending: dict = {}  # signal number -> frame, held back
        self.state = _HOLDING

    def _on_signal(self, signum, frame) -> None:
        if self.state == _HOLDING:
            self.pending.setdefault(signum, frame)
            return
        if self.state == _ALLOWED:
            # Closed before the handler outside runs: whatever it raises, the code after the wait (the
            # clean-up) runs held, and a second signal on its heels is recorded, not raised there.
            self.state = _HOLDING
            self.pending.pop(signum, None)
            self.previous[signum](signum, frame)
            self.state = _ALLOWED  # that handler returned normally: the wait goes on
            return
        self.previous[signum](signum, frame)  # left installed after the block: act as the handler outside

    def _deliver_pending(self) -> None:
        while self.pending:
            signum = next(iter(self.pending))
            frame = self.pending.pop(signum)
            if self.state == _ALLOWED:
                self._on_signal(signum, frame)
            else:
                self.previous[signum](signum, frame)

    def allowed(self) -> "_Allowed":
        """Within a held block, a wait where signals are delivered (one held back so far, at once)."""
        return _Allowed(self)


class _Allowed:
    __slots__ = ("gate",)

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def __enter__(self) -> None:
        self.gate.state = _ALLOWED
        self.gate._deliver_pending()

    def __exit__(self, *exc) -> None:
        self.gate.state = _HOLDING


class _OpenGate(Gate):
    """Where nothing can be held (not the main thread): waits and the rest alike."""

    def allowed(self) -> nullcontext:
        return nullcontext()


def _unwrapped(signum, handler):
    """The handler outside any finished gate (one left installed by a signal that cut its restoration)."""
    while getattr(handler, "__func__", None) is Gate._on_signal and handler.__self__.state == _DONE:
        handler = handler.__self__.previous[signum]
    return handler


_SIGNALS = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})


class interrupts_held:
    """Within the block a signal with a Python handler is recorded instead of handled; see the module text.

    ``with interrupts_held() as gate:`` yields a :class:`Gate`; ``with gate.allowed():`` marks a wait. Only
    the main thread runs Python signal handlers, so elsewhere this holds nothing back. Written as a class, not
    a generator: no Python code of contextlib's runs between taking the signals and entering the block.
    """

    __slots__ = ("gate",)

    def __enter__(self) -> Gate:
        if threading.current_thread() is not threading.main_thread():
            self.gate = _OpenGate()
            return self.gate
        gate = self.gate = Gate()
        try:
            for signum in _SIGNALS:
                handler = _unwrapped(signum, signal.getsignal(signum))
                if callable(handler):
                    gate.previous[signum] = handler  # recorded before the swap: __exit__ can put it back
                    signal.signal(signum, gate._on_signal)
        except BaseException:
            self.__exit__()
            raise
        return gate

    def __exit__(self, *exc) -> None:
        gate = self.gate
        if isinstance(gate, _OpenGate):
            return
        # From here the gate's handler acts as the one outside, wherever it is still set: a signal that lands
        # between two of the restorations below and raises leaves a handler that only forwards (the next
        # held block finds it and puts the one outside back).
        gate.state = _DONE
        for signum, handler in gate.previous.items():
            if signal.getsignal(signum) == gate._on_signal:
                signal.signal(signum, handler)
        gate._deliver_pending()
