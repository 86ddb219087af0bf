"""The errors a launch can raise, each saying what happened and what to do."""


class LaunchError(ValueError):
    """The launch could not go ahead: bad input to ``run_ranks`` (caught before any rank starts), or the launcher
    broke under it (the rank server died or could not start; the next launch starts a new one)."""


class RankError(RuntimeError):
    """A rank failed: it raised, died or could not send its result back. ``rank``: the first rank that failed;
    ``exc_type``: name of the original exception type (None when the rank died without one); ``remote_traceback``
    (text); ``outputs``: each rank's output lines so far; ``results``: the partial :class:`RankResults`."""

    def __init__(self, message: str, rank=None, exc_type=None, remote_traceback="", outputs=None, results=None):
        super().__init__(message)
        self.rank, self.exc_type, self.remote_traceback = rank, exc_type, remote_traceback
        self.outputs, self.results = outputs or {}, results


class RankTimeout(RankError):
    """Ranks were still running at the timeout: likely a deadlock or mismatched collectives. Each rank still running
    maps, in ``stacks``, to its Python stack (all threads) taken just before it was ended; in ``waiting_in``, to the
    torch.distributed call it was blocked in; in ``collectives``, to ``{"last_completed": (seq, name), "stuck_in": (seq,
    name)}`` from torch's flight recorder (None: no dump); in ``native_stacks``, to ``py-spy dump --native`` of it,
    where py-spy could take one. ``flight_dumps``: the folder of the recorder's dumps, a file per rank, for ``python -m
    torch.distributed.flight_recorder.fr_trace``."""

    def __init__(
        self, message: str, stacks=None, waiting_in=None, collectives=None, flight_dumps=None, native_stacks=None, **kw
    ):
        super().__init__(message, **kw)
        self.stacks, self.waiting_in, self.collectives = stacks or {}, waiting_in or {}, collectives or {}
        self.native_stacks, self.flight_dumps = native_stacks or {}, flight_dumps
