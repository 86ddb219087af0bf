"""One launch as the notebook sees it: the pipes it owns, what the ranks sent, and how to end them.

Ownership rules, because an interrupt or a second thread may come at any moment:
- every file descriptor of the launch is recorded in ``Job.owned`` the moment it exists (interrupts held) and is
  closed only through :meth:`Job.close_fd`, which forgets it first: never closed twice, so never closed after
  another thread got the same number;
- the ranks are ended by closing the job's status pipe, the leader's cue (:mod:`~.server`). The notebook signals
  the group itself (stack dumps) only while it holds that pipe open, so the group's number cannot be reused."""

import os
import pickle
import select
import selectors
import shutil
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path

import psutil

from mgpu_helpers.launcher import flight
from mgpu_helpers.launcher.interrupts import interrupts_held
from mgpu_helpers.launcher.messages import Failed, RankExit, Returned, Running
from mgpu_helpers.launcher.wire import FrameReader, LineReader

OUTPUT_LINES_KEPT = 2000
READ_CHUNK = 1 << 20  # large results (hundreds of MB) arrive in few reads


class Job:
    def __init__(self, world_size: int, backend: str, reason: str, timeout_s: float, stream: bool, quiet: bool):
        self.world_size, self.backend, self.reason = world_size, backend, reason
        self.timeout_s, self.stream, self.quiet = timeout_s, stream, quiet
        self.t0 = time.monotonic()
        self.job_dir = self.flight_dumps = None  # its folder; the flight recorder's dumps, kept after a hang
        self.outputs: list[list[str]] = [[] for _ in range(world_size)]
        self.results: dict[int, Returned | Failed] = {}
        self.exits: dict[int, int] = {}
        self.running_since: dict[int, float] = {}
        self.first_error: tuple[int, Failed] | None = None
        self.pgid = self.status_fd = self.leader_fd = None  # the leader's pid (the ranks' group), its pipe and pidfd
        self.leader = None  # psutil.Process of the leader, checked to be the server's child
        self.server_proc = None  # the rank server's Popen, to tell its death from the leader's
        self.leader_gone = False  # the status pipe closed under us: the leader died
        self.ended = False  # every process of the job is dead, or being killed with nothing to read
        self.owned: set[int] = set()
        self.pipes: list[tuple[int, int, str, int | None]] = []  # (read end, write end, "out"/"res"/"status", rank)
        self.sel = selectors.DefaultSelector()

    def open_pipes(self) -> list[int]:
        """Create the job's pipes: each rank's output, each rank's results, the leader's status; returns their write
        ends, for the server, in that order. Call with interrupts held: each is owned the moment it exists."""
        for kind, rank in [(kind, r) for kind in ("out", "res") for r in range(self.world_size)] + [("status", None)]:
            fds = os.pipe()
            self.owned.update(fds)
            self.pipes.append((*fds, kind, rank))
        return [w for _, w, _, _ in self.pipes]

    def close_fd(self, fd: int) -> None:
        """Close ``fd`` if this job still owns it, exactly once. Interrupts are held back, since it is called while
        ranks are supervised too: the fd is never forgotten unclosed (a leak) nor closed unforgotten (twice)."""
        with interrupts_held():
            if fd in self.owned:
                self.owned.discard(fd)
                with suppress(KeyError, ValueError):
                    self.sel.unregister(fd)
                os.close(fd)

    def attach_leader(self, leader_pid: int, server_proc) -> None:
        """Remember the job's leader (its pid is the ranks' process group) and the server that forked it, and read the
        pipes from now on; their write ends are closed here (the leader and the ranks have their own copies now)."""
        self.pgid, self.server_proc = leader_pid, server_proc
        with suppress(psutil.Error):
            leader = psutil.Process(leader_pid)
            # The leader waits for us before it exits, so this is it, unless something killed it already
            # and its pid went to another process: then that process is not the server's child.
            if leader.ppid() == server_proc.pid:
                self.leader = leader
                # A descriptor that becomes readable the moment the leader exits, so the clean-up waits for
                # exactly that (the leader is alive until we close its status pipe: this is its pid). Linux only.
                with suppress(OSError, AttributeError):
                    self.leader_fd = os.pidfd_open(leader_pid)
                    self.owned.add(self.leader_fd)
        for r, w, kind, rank in self.pipes:
            self.close_fd(w)
            os.set_blocking(r, False)
            self.sel.register(r, selectors.EVENT_READ, (kind, rank, LineReader() if kind == "out" else FrameReader()))
        self.status_fd = self.pipes[-1][0]

    def _emit(self, rank: int, lines: list[str]) -> None:
        kept = self.outputs[rank]
        kept.extend(lines)
        del kept[:-OUTPUT_LINES_KEPT]  # all but the last OUTPUT_LINES_KEPT (none while there are fewer)
        if self.stream and lines:
            sys.stdout.write("".join(f"[rank {rank}] {ln}\n" for ln in lines))
            sys.stdout.flush()

    def _handle(self, rank, frame: bytes) -> None:
        msg = pickle.loads(frame)  # cloudpickle's frames too: they load with the standard unpickler
        if isinstance(msg, RankExit):  # the leader's status pipe carries nothing else
            self.exits[msg.rank] = msg.code
        elif isinstance(msg, Running):
            self.running_since[rank] = time.monotonic()
        else:
            self.results[rank] = msg
            if isinstance(msg, Failed) and self.first_error is None:
                self.first_error = (rank, msg)

    def pump(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for anything from the ranks and take it in; returns how many pipes spoke."""
        events = self.sel.select(timeout)
        for key, _ in events:
            kind, rank, reader = key.data
            try:
                chunk = os.read(key.fd, READ_CHUNK)
            except BlockingIOError:
                continue
            if kind == "out":
                self._emit(rank, reader.feed(chunk) if chunk else reader.flush())
            else:
                for frame in reader.feed(chunk):
                    self._handle(rank, frame)
            if not chunk:
                self.leader_gone |= kind == "status"
                self.close_fd(key.fd)
        return len(events)

    def drain(self, seconds: float) -> None:
        """Read until every pipe we read is closed (ranks gone) or ``seconds`` pass, then what is left in them."""
        self.pump_until(lambda: not self.sel.get_map(), seconds)
        while self.sel.get_map() and self.pump(0):
            pass

    def returned_ranks(self) -> list[int]:
        return sorted(r for r, res in self.results.items() if isinstance(res, Returned))

    def died_without_result(self) -> list[int]:
        return sorted(r for r in self.exits if r not in self.results)

    def leader_alive(self) -> bool:
        """True while the group ``pgid`` is certainly this job's: we hold the status pipe, it has not closed."""
        return self.leader is not None and self.status_fd in self.owned and not self.leader_gone

    def signal_ranks(self, signum: int) -> None:
        """Send ``signum`` to the job's process group (the leader ignores the dump signals)."""
        if self.leader_alive():
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signum)

    def kill(self) -> None:
        """End every process of the job: close the status pipe, which the leader takes as its cue."""
        leader = self.leader if self.leader_alive() else None
        self.close_fd(self.status_fd)  # a no-op before the pipes exist: None is never owned
        # Every rank exited (the leader ends the orphans on its own) or returned (it flushed its output first and
        # is only leaving the group; the leader kills it as the pipe closes): nothing to wait for, and a repeat
        # launch should not wait for 30 ms of process exits. Otherwise the ranks are gone before this returns.
        if len(self.exits) == self.world_size or len(self.returned_ranks()) == self.world_size:
            self.ended = True
        elif leader is not None:
            with suppress(psutil.Error):
                try:
                    self._wait_leader(2.0)  # it kills the job's process group, itself included
                    self.ended = True
                except psutil.TimeoutExpired:
                    # A leader that does not answer (stopped, say): kill it; its ranks die with it (PDEATHSIG).
                    # psutil checks the process is still the same one, so no other process can be hit.
                    leader.kill()

    def _wait_leader(self, seconds: float) -> None:
        """Wait for the leader to exit: on its pidfd where there is one, else psutil's polling wait."""
        if self.leader_fd not in self.owned:
            self.leader.wait(seconds)
        elif not select.select([self.leader_fd], [], [], seconds)[0]:
            raise psutil.TimeoutExpired(seconds, self.leader.pid)

    def finish(self) -> None:
        """Kill, read what is left, close every descriptor and remove the job's folder. Call with interrupts held:
        whatever the first two steps raise (a broken frame, a failing write to the cell), the descriptors are
        closed and the folder removed; only KeyboardInterrupt, SystemExit and the like are raised again, after."""
        try:
            self.kill()
            # Once the job's processes are killed, what they wrote is in the pipes: read it, and do not wait for
            # them to finish dying (that is their exit's work, not the launch's).
            self.drain(0.0 if self.ended else 2.0)
        except Exception:
            pass
        finally:
            for fd in list(self.owned):
                with suppress(OSError):
                    self.close_fd(fd)
            self.sel.close()
            if self.job_dir is not None:
                shutil.rmtree(self.job_dir, ignore_errors=True)
                if os.path.exists(self.job_dir):  # a rank killed in the middle of writing a file there
                    shutil.rmtree(self.job_dir, ignore_errors=True)

    def pump_until(self, done, seconds: float) -> None:
        """Keep the pipes flowing (ranks may be printing) until ``done()`` or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            self.pump(0.05)

    def take_dumps(self, ranks: list[int]) -> tuple[dict[int, str], dict[int, dict | None]]:
        """Python stacks and flight-recorder dumps of ``ranks`` (SIGUSR2; SIGUSR1 only as the stacks' fallback)."""
        # Each rank's dump thread writes its stacks, then its flight recorder, each whole and then renamed:
        # once both files exist they are complete.
        whole = {r: flight.stack_path(self.job_dir, r) for r in ranks}
        fr_paths = {r: flight.dump_path(self.job_dir, r) for r in ranks}
        self.signal_ranks(flight.DUMP_SIGNAL)
        self.pump_until(lambda: all(os.path.exists(whole[r]) and os.path.exists(fr_paths[r]) for r in ranks), 2.0)
        if not all(os.path.exists(whole[r]) for r in ranks):
            # A dump thread that could not run (its main thread holds the GIL): faulthandler's own dump, from a
            # signal handler. Only now: sent together with the first, it was seen to stop half way.
            self.signal_ranks(signal.SIGUSR1)
            self.pump_until(lambda: False, 0.5)
        # The whole dump, else the fallback (which may be cut short), else nothing.
        stacks = {r: _text_of(whole[r]) or _text_of(flight.stack_path(self.job_dir, r, partial=True)) for r in ranks}
        self.flight_dumps = flight.keep_dumps(fr_paths)
        return stacks, {r: flight.summarise(flight.read_dump(p)) for r, p in fr_paths.items()}


def _text_of(path: str) -> str:
    """The stripped text of ``path``; "" when it cannot be read (not written yet, or the folder is gone)."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""
