"""Holding back the notebook's interrupts while the launcher changes state that must not be left half-done. Jupyter's
"interrupt" (a SIGINT: KeyboardInterrupt at whatever bytecode runs) or a cell's time limit (a SIGALRM whose handler
raises) between "job sent" and "reply read" would leave the server's reply unread; between "pipe created" and "pipe
recorded", leak a descriptor; in the clean-up, leave ranks, descriptors or the job's folder behind.

So every signal that has a Python handler is held back (:class:`interrupts_held`) and let through only in the
launcher's waits (:meth:`Gate.allowed`), where every resource already has exactly one owner; one that came while held
is delivered, to the handler it was meant for, at the next wait or as the block ends. The gate's handler stays installed
for the whole block and closes a wait itself before it delivers a signal: a second interrupt right behind the first
never finds the clean-up unprotected."""

import signal
import threading

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
        elif self.state == _ALLOWED:
            # Closed before the handler outside runs: whatever it raises, the code after the wait (the
            # clean-up) runs held, and a second signal on its heels is recorded, not raised there.
            self.state = _HOLDING
            self.pending.pop(signum, None)
            self.previous[signum](signum, frame)
            self.state = _ALLOWED  # that handler returned normally: the wait goes on
        else:
            self.previous[signum](signum, frame)  # left installed after the block: act as the handler outside

    def _deliver_pending(self) -> None:
        while self.pending:  # called _ALLOWED or _DONE, never _HOLDING: each goes to the handler outside
            signum = next(iter(self.pending))  # in the order they came
            self._on_signal(signum, self.pending.pop(signum))

    def allowed(self) -> "Gate":
        """Within a held block, a wait where signals are delivered (one held back so far, at once)."""
        return self

    def __enter__(self) -> None:
        self.state = _ALLOWED
        self._deliver_pending()

    def __exit__(self, *exc) -> None:
        self.state = _HOLDING


def _unwrapped(signum, handler):
    """The handler outside any finished gate (one left installed by a signal that cut its restoration)."""
    while getattr(handler, "__func__", None) is Gate._on_signal and handler.__self__.state == _DONE:
        handler = handler.__self__.previous[signum]
    return handler


_SIGNALS = sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})


class interrupts_held:
    """``with interrupts_held() as gate:`` records, not handles, each signal with a Python handler; ``with
    gate.allowed():`` marks a wait. Only the main thread runs Python signal handlers, so elsewhere this holds nothing
    back. A class, not a generator: no code of contextlib's runs between taking the signals and the block."""

    __slots__ = ("gate",)

    def __enter__(self) -> Gate:
        gate = self.gate = Gate()
        if threading.current_thread() is not threading.main_thread():
            return gate  # it takes no signal: its waits and the rest are alike
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
        # From here the gate's handler acts as the one outside, wherever it is still set: a signal that lands
        # between two of the restorations below and raises leaves a handler that only forwards (the next
        # held block finds it and puts the one outside back).
        gate.state = _DONE
        for signum, handler in gate.previous.items():
            if signal.getsignal(signum) == gate._on_signal:
                signal.signal(signum, handler)
        gate._deliver_pending()
