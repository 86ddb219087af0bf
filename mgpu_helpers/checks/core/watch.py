"""Which ``torch.distributed`` calls the learner's code made in a rank, under any name, forbidden ones refused.

Replacing ``dist.all_reduce`` on the module is not enough: a name imported at the top of a cell arrives in the
rank as a reference to the function object itself, as do an alias and torch's own internals. So the object's
``__code__`` is replaced in place (:meth:`WatchedCalls._swap`): every path that reaches it runs the watcher, which
calls the original body, kept in a copy."""

import contextlib
import itertools
import types
from collections import namedtuple

from .course_code import refusing
from .failure import CheckFailed

P2P_CALLS = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
# fmt: off
COLLECTIVE_CALLS = (
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list", "all_reduce_coalesced",
    "all_gather_coalesced",
)
# fmt: on
DIST_CALLS = P2P_CALLS + COLLECTIVE_CALLS
SENDS = ("dist.send", "dist.isend", "batch:isend")  # how the recorded calls name a message out ...
RECVS = ("dist.recv", "dist.irecv", "batch:irecv")  # ... and in

# The file name of the watchers' code: under mgpu_helpers/checks/, so a stack through a watcher reads as the
# course's frames; its suffix tells the watcher itself from a checker (course_code.py looks for it).
WATCHER_FILE = "mgpu_helpers/checks/core/watch.py (watcher)"


def _code_with(freevars: tuple, body: str):
    """A code object ``f(*args, **kwargs)`` running ``body`` (one line) with exactly ``freevars`` as free variables:
    it can replace the code of any function with that closure (decorated ones too)."""
    names = ", ".join(freevars)
    touch = f"        ({names},)\n" if freevars else ""
    ns: dict = {}
    source = f"def outer({names}):\n    def f(*args, **kwargs):\n{touch}        {body}\n    return f\n"
    exec(compile(source, WATCHER_FILE, "exec"), ns)
    return ns["outer"](*([None] * len(freevars))).__code__


_hook_keys = itertools.count()


def _numel(x):
    if isinstance(x, (list, tuple)):
        parts = [p for p in map(_numel, x) if p is not None]
        return sum(parts) if parts else None
    return int(x.numel()) if hasattr(x, "numel") else None


def _nbytes(x) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return int(x.numel() * x.element_size()) if hasattr(x, "element_size") else 0


class DistCall(namedtuple("DistCall", "name peer numel")):
    """One call the learner's code made, ``(name, peer, numel)``, plus ``.nbytes`` (of the first tensor argument),
    ``.numels`` (per positional argument, None where not a tensor) and ``.async_op``. ``name``: ``dist.<function>``, or
    ``batch:isend`` / ``batch:irecv`` per operation of a ``batch_isend_irecv``; ``peer``: a point-to-point call's."""

    __repr__ = tuple.__repr__  # shown as the plain (name, peer, numel) it compares equal to

    def __new__(cls, name, peer, numel, nbytes=0, numels=(), async_op=False):
        self = super().__new__(cls, name, peer, numel)
        self.nbytes, self.numels, self.async_op = nbytes, tuple(numels), bool(async_op)
        return self


class WatchedCalls:
    """Inside a rank, around the learner's code: the functions of :data:`DIST_CALLS` (and ``init_process_group`` with
    ``watch_init``) watched under any name. ``calls``: a :class:`DistCall` per call the learner's code made (torch's
    own nested calls not counted twice); ``inits``: the arguments of each ``init_process_group``. A call of ``refuse``
    raises ``EXERCISE_FORBIDDEN``, of ``course`` (the course's functions) ``EXERCISE_COURSE_CODE``, for
    :func:`~.ranks.rank_failure` to read. ``on_call(call, result) -> result``: after each counted call."""

    def __init__(self, refuse=(), course=(), on_call=None, watch_init: bool = False):
        self.refuse, self.course, self.on_call, self.watch_init = set(refuse), list(course), on_call, watch_init
        self.calls, self.inits = [], []
        self._depth, self._exits = 0, contextlib.ExitStack()  # what __exit__ undoes, the last first

    def __enter__(self):
        import torch.distributed.distributed_c10d as c10d

        for name in DIST_CALLS:
            target = getattr(c10d, name, None)
            if getattr(target, "__code__", None) is not None:
                self._swap(target, self._watcher(name))
        if self.watch_init:
            self._swap(c10d.init_process_group, self._init_watcher)
        if self.course:  # the one rule of the course's code (course_code.refusing), in the rank
            failure = lambda label: PermissionError(f"EXERCISE_COURSE_CODE {label}")
            self._exits.enter_context(refusing("", self.course, packages=False, failure=failure))
        return self

    def __exit__(self, *exc):
        return self._exits.__exit__(*exc)

    def _swap(self, target, hook) -> None:
        """Until the block ends, ``target(*args, **kwargs)`` becomes ``hook(original, args, kwargs)``, ``original``
        running the old code. (Its key stays in the module's globals: a copy of the old code may still be running.)"""
        original = types.FunctionType(
            target.__code__, target.__globals__, target.__name__, target.__defaults__, target.__closure__
        )
        original.__kwdefaults__ = target.__kwdefaults__
        key = f"_MGPU_HOOK_{next(_hook_keys)}"
        target.__globals__[key] = lambda args, kwargs: hook(original, args, kwargs)
        self._exits.callback(setattr, target, "__code__", target.__code__)
        target.__code__ = _code_with(target.__code__.co_freevars, f"return {key}(args, kwargs)")

    def _watcher(self, name):
        def watcher(original, args, kwargs):
            outer = self._depth == 0
            if outer:
                if name in self.refuse:
                    raise PermissionError(f"EXERCISE_FORBIDDEN dist.{name}")
                self._record(name, args, kwargs)
            self._depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if outer and self.on_call is not None:
                result = self.on_call(self.calls[-1], result)
            return result

        return watcher

    def _record(self, name, args, kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        key = "dst" if "send" in name else "src"  # the peer of a point-to-point call
        peer = args[1] if len(args) > 1 else kwargs.get(key, kwargs.get(f"group_{key}"))
        peer = peer if name in ("send", "recv", "isend", "irecv") else None
        numels, async_op = [_numel(a) for a in args], kwargs.get("async_op", False)
        self.calls.append(DistCall(f"dist.{name}", peer, _numel(first), _nbytes(first), numels, async_op))
        if name == "batch_isend_irecv":
            for op in args[0] if args else kwargs.get("p2p_op_list", []):
                kind, t = "isend" if "send" in getattr(op.op, "__name__", "") else "irecv", op.tensor
                self.calls.append(DistCall(f"batch:{kind}", op.peer, _numel(t), _nbytes(t), [_numel(t)], True))

    def _init_watcher(self, original, args, kwargs):
        plain = lambda v: v if isinstance(v, (str, int, float, type(None))) else repr(v)
        self.inits.append({k: plain(v) for k, v in kwargs.items()} | {"_args": [plain(a) for a in args]})
        return original(*args, **kwargs)


def call_label(name: str) -> str:
    """A recorded call's name as the learner wrote it: ``batch:isend`` is an isend inside ``batch_isend_irecv``."""
    return f"dist.batch_isend_irecv 里的 {name[6:]}" if name.startswith("batch:") else name


def refuse_calls(calls_by_rank, names, what: str, why: str) -> None:
    """Raise :class:`CheckFailed` naming the first recorded call of one of ``names`` (an exercise's rule)."""
    for rank, calls in enumerate(calls_by_rank):
        for call_ in calls:
            if call_[0].split(".")[-1].split(":")[-1] in names:
                raise CheckFailed(f"{what}：rank {rank} 调用了 {call_label(call_[0])}。{why}")
