"""Supervising one launch from the notebook side: reading the ranks' pipes, noticing failures, explaining them.

:func:`mgpu_helpers.launcher.run_ranks` hands each job here once its ranks are forked. Everything that turns
what the ranks sent (lines, result frames, exit codes, stacks) into a :class:`RankResults` or a clear
:class:`~mgpu_helpers.RankError` lives in this module.
"""
from __future__ import annotations

import os
import pickle
import re
import selectors
import signal
import sys
import time

from mgpu_helpers.launcher.errors import RankError, RankTimeout
from mgpu_helpers.launcher.results import RankResults
from mgpu_helpers.launcher.wire import FrameReader, LineReader

OUTPUT_LINES_KEPT = 2000


_C10D_CALL = re.compile(r'File "[^"]*torch/distributed/[^"]*", line \d+ in (\w+)')
_USER_FRAME = re.compile(r'File "([^"]*)", line (\d+) in (\w+)')


def _waiting_in(stack: str) -> str | None:
    """The torch.distributed call a rank is blocked in, read from its faulthandler dump, if any."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack):
        if "mgpu_helpers/launcher/rank.py" not in block:
            continue                      # only the rank's main thread runs our entry point
        calls = [c for c in _C10D_CALL.findall(block) if not c.startswith("_") and c != "wrapper"]
        if calls:
            where = ""
            for path, line, func in _USER_FRAME.findall(block):
                if "torch/" not in path and "mgpu_helpers/launcher/rank.py" not in path:
                    where = f" (called from {func}, line {line})"
                    break
            return f"dist.{calls[0]}{where}"
        if re.search(r'torch/cuda/[^"]*", line \d+ in synchronize', block):
            # NCCL queues collectives on a CUDA stream: the host then blocks where it waits for the GPU.
            return "torch.cuda.synchronize (waiting for GPU work queued earlier, such as an NCCL collective)"
    return None


class _Job:
    """The notebook's view of one launch: pipes in, ranks' pids, their results and fate."""

    def __init__(self, world_size: int, stream: bool):
        self.n = world_size
        self.stream = stream
        self.outputs = [[] for _ in range(world_size)]
        self.results: dict[int, tuple] = {}
        self.exits: dict[int, int] = {}
        self.pids: dict[int, int] = {}
        self.running_since: dict[int, float] = {}
        self.first_error: tuple | None = None
        self.pgid: int | None = None
        self.sel = selectors.DefaultSelector()
        self.open_fds: set[int] = set()

    # -- reading what the ranks send --------------------------------------------------------------
    def watch(self, fd: int, kind: str, rank: int | None) -> None:
        os.set_blocking(fd, False)
        reader = LineReader() if kind == "out" else FrameReader()
        self.sel.register(fd, selectors.EVENT_READ, (kind, rank, reader))
        self.open_fds.add(fd)

    def _emit(self, rank: int, lines: list[str]) -> None:
        kept = self.outputs[rank]
        kept.extend(lines)
        if len(kept) > OUTPUT_LINES_KEPT:
            del kept[: len(kept) - OUTPUT_LINES_KEPT]
        if self.stream and lines:
            sys.stdout.write("".join(f"[rank {rank}] {ln}\n" for ln in lines))
            sys.stdout.flush()

    def _handle(self, kind: str, rank, frame: bytes) -> None:
        import cloudpickle
        msg = cloudpickle.loads(frame) if kind == "res" else pickle.loads(frame)
        if kind == "status":
            if msg[0] == "pids":
                self.pids = msg[1]
            else:
                _tag, r, code = msg
                self.exits[r] = code
            return
        if msg[0] == "running":
            self.running_since[rank] = time.monotonic()
            return
        self.results[rank] = msg
        if msg[0] == "error" and self.first_error is None:
            self.first_error = (rank, msg)

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for anything from the ranks and take it in."""
        for key, _ in self.sel.select(timeout):
            fd = key.fd
            kind, rank, reader = key.data
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                if kind == "out":
                    self._emit(rank, reader.flush())
                self.sel.unregister(fd)
                os.close(fd)
                self.open_fds.discard(fd)
                continue
            if kind == "out":
                self._emit(rank, reader.feed(chunk))
            else:
                for frame in reader.feed(chunk):
                    self._handle(kind, rank, frame)

    def drain(self, seconds: float) -> None:
        """Read until every pipe is closed (ranks gone) or ``seconds`` pass."""
        end = time.monotonic() + seconds
        while self.open_fds and time.monotonic() < end:
            self.pump(max(0.0, min(0.05, end - time.monotonic())))

    # -- state -------------------------------------------------------------------------------------
    def finished(self, rank: int) -> bool:
        return rank in self.results or rank in self.exits

    def all_exited(self) -> bool:
        return len(self.exits) == self.n or (not self.open_fds)

    def kill(self) -> None:
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        for fd in list(self.open_fds):
            try:
                self.sel.unregister(fd)
            except Exception:
                pass
            os.close(fd)
        self.open_fds.clear()
        self.sel.close()

    def take_stacks(self, job_dir: str, ranks: list[int]) -> dict[int, str]:
        """Ask each rank in ``ranks`` for its Python stack (SIGUSR1 -> faulthandler) and read them."""
        for r in ranks:
            pid = self.pids.get(r)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        stacks, deadline = {}, time.monotonic() + 2.0
        paths = {r: os.path.join(job_dir, f"stack-{r}.txt") for r in ranks}
        sizes = {r: -1 for r in ranks}
        while time.monotonic() < deadline:
            self.pump(0.1)   # keep the pipes flowing while the dumps are written
            now = {r: os.path.getsize(p) if os.path.exists(p) else 0 for r, p in paths.items()}
            if all(now[r] > 0 and now[r] == sizes[r] for r in ranks):
                break
            sizes = now
        for r, p in paths.items():
            try:
                with open(p) as f:
                    stacks[r] = f.read().strip()
            except OSError:
                stacks[r] = ""
        return stacks


def _tail(lines: list[str], n: int = 15) -> str:
    if not lines:
        return "    (no output)"
    return "\n".join("    " + ln for ln in lines[-n:])


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "ended without a result"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} without returning a result"


def _early_returners(job: _Job, except_rank: int) -> list[int]:
    return sorted(r for r, res in job.results.items() if res[0] == "ok" and r != except_rank)


def _rank_error(job: _Job, rank: int, msg: tuple, partial: RankResults) -> RankError:
    _tag, where, type_name, text, tb, blob = msg
    original = None
    if blob is not None:
        try:
            import cloudpickle
            original = cloudpickle.loads(blob)
        except Exception:
            original = None
    hint = ""
    if where == "sending the result":
        hint = ("\nThe return value could not be sent back: return plain Python values, NumPy arrays or "
                "tensors (they are moved to the CPU for you).")
    elif where == "unpickling the function":
        hint = ("\nThe rank could not rebuild fn: a module it needs may not be importable by the ranks. "
                "Define fn in the notebook, or make its module importable (same sys.path and folder).")
    early = _early_returners(job, rank)
    if early and type_name in ("RuntimeError", "DistBackendError"):
        hint += (f"\nNote: rank(s) {early} had already returned. A rank that skips a collective or a recv "
                 "leaves its peers waiting or talking to a closed connection.")
    message = (f"rank {rank} raised {type_name} while {where}: {text}\n"
               f"--- traceback on rank {rank} ---\n{tb.rstrip()}\n"
               f"--- last output of rank {rank} ---\n{_tail(job.outputs[rank])}{hint}")
    err = RankError(message, rank=rank, exc_type=type_name, remote_traceback=tb,
                    outputs={r: list(o) for r, o in enumerate(job.outputs)}, results=partial)
    err.original = original
    return err


def _partial(job: _Job, world_size: int, backend: str, reason: str, t0: float) -> RankResults:
    res = RankResults(world_size=world_size, backend=backend, reason=reason,
                      outputs=[list(o) for o in job.outputs], launch_seconds=time.monotonic() - t0)
    for r in range(world_size):
        got = job.results.get(r)
        ok = got is not None and got[0] == "ok"
        res.values.append(got[1] if ok else None)
        res.init_seconds.append(got[2] if ok else None)
        res.seconds.append(got[3] if ok else None)
        res.spans.append(got[4] if ok else [])
    return res


def supervise(job: _Job, world_size, backend, reason, timeout, t0, job_dir, quiet) -> RankResults:
    """Follow a launched job until every rank has answered; returns its :class:`RankResults`.

    Raises :class:`RankError` as soon as a rank raises or dies (a death wins over the errors it causes in
    its peers), and :class:`RankTimeout` past ``t0 + timeout``. The caller ends the ranks either way.
    """
    deadline = t0 + timeout
    while True:
        job.pump(0.05)
        if job.first_error is not None:
            # Let the peers' own errors and last lines arrive for a moment, then end them all.
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                job.pump(0.05)
            dead = _died_without_result(job)
            if dead:
                # A rank that died is the root cause; its peers' errors ("connection closed") follow from it.
                _raise_died(job, dead[0], world_size, backend, reason, t0)
            job.kill()
            job.drain(2.0)
            rank, msg = job.first_error
            raise _rank_error(job, rank, msg, _partial(job, world_size, backend, reason, t0))
        if _died_without_result(job):
            job.drain(0.5)     # its result or error may still be in the pipe
            dead = _died_without_result(job)
            if dead and job.first_error is None:
                _raise_died(job, dead[0], world_size, backend, reason, t0)
        if len(job.results) == world_size:
            # Every rank has answered; let them leave the process group and exit.
            end = time.monotonic() + 10.0
            while not job.all_exited() and time.monotonic() < end:
                job.pump(0.05)
            job.drain(0.5)
            break
        if time.monotonic() > deadline:
            _raise_timeout(job, world_size, backend, reason, timeout, t0, job_dir)
    result = _partial(job, world_size, backend, reason, t0)
    if not quiet:
        print(f"[run_ranks] {world_size} rank(s), backend {backend} ({reason}), "
              f"{result.launch_seconds:.2f} s")
    return result


def _died_without_result(job: _Job) -> list[int]:
    return sorted(r for r in job.exits if r not in job.results)


def _raise_died(job: _Job, r: int, world_size, backend, reason, t0):
    job.kill()
    job.drain(2.0)
    early = _early_returners(job, r)
    note = f"\nRank(s) {early} had already returned." if early else ""
    failed = sorted(k for k, res in job.results.items() if res[0] == "error")
    if failed:
        note += (f"\nRank(s) {failed} then failed too ({job.results[failed[0]][2]}), most likely because "
                 f"rank {r} was gone.")
    raise RankError(
        f"rank {r} {_describe_exit(job.exits.get(r))} while the other ranks were running (they have been "
        f"ended).{note}\n--- last output of rank {r} ---\n{_tail(job.outputs[r])}",
        rank=r, exc_type=None, outputs={k: list(o) for k, o in enumerate(job.outputs)},
        results=_partial(job, world_size, backend, reason, t0))


def _raise_timeout(job: _Job, world_size, backend, reason, timeout, t0, job_dir):
    stuck = [r for r in range(world_size) if not job.finished(r)]
    stacks = job.take_stacks(job_dir, stuck)
    job.kill()
    job.drain(2.0)
    waiting = {r: w for r in stuck if (w := _waiting_in(stacks.get(r, "")))}
    done = sorted(r for r in range(world_size) if job.finished(r))
    lines = [f"{len(stuck)} of {world_size} rank(s) were still running after {timeout:g} s and have been ended."]
    for r in stuck:
        phase = "in fn" if r in job.running_since else "joining the process group"
        lines.append(f"  rank {r}: {waiting.get(r, phase)}")
    if done:
        lines.append(f"  rank(s) {done} had already finished: a rank that returns early leaves its peers "
                     "waiting at their next collective or recv.")
    calls = {w.split(" ")[0] for w in waiting.values()}
    if len(calls) > 1:
        lines.append("Ranks are blocked in different collectives: every rank must call the same collectives "
                     "in the same order (mismatched collectives).")
    elif waiting and all(w.startswith(("dist.send", "dist.recv")) for w in waiting.values()):
        lines.append("Every rank is blocked in a blocking send/recv: a deadlock. Pair each send with a recv "
                     "on the peer (reorder), or use isend/irecv / batch_isend_irecv.")
    lines.append("Run with debug=True for torch's own check (TORCH_DISTRIBUTED_DEBUG=DETAIL).")
    for r in stuck:
        lines.append(f"--- Python stack of rank {r} ---\n{stacks.get(r) or '(none taken)'}")
        lines.append(f"--- last output of rank {r} ---\n{_tail(job.outputs[r], 5)}")
    raise RankTimeout("\n".join(lines), stacks=stacks, waiting_in=waiting, rank=stuck[0] if stuck else None,
                      outputs={k: list(o) for k, o in enumerate(job.outputs)},
                      results=_partial(job, world_size, backend, reason, t0))
