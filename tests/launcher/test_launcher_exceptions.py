"""Whatever exception lands wherever in the launcher, at most the call it hit fails and the next one works.

A notebook raises exceptions into running code in three ways: the interrupt button (SIGINT, turned into
KeyboardInterrupt), a cell's time limit (a SIGALRM whose Python handler raises its own exception, here
``CellTimeLimit``), and callbacks the launcher runs (a widget behind ``sys.stdout`` that raises SystemExit).
Each test injects one of them at a chosen point, never by a timer: a real signal raised from a trace function
at the n-th line the launcher runs after some event, or a patched call that raises. After each, the launcher's
state must be whole (a live server always has an open socket; a Ready that was read is recorded), the next
call must work, and nothing may be left: no rank process, no descriptor, no job folder.

The points that once broke every later launch, each covered below:
- the server being stopped (its socket closed, its process ended) when the exception lands;
- the moment just after the server's Ready was read;
- a second interrupt right after a first, where a wait closes again, and another in the clean-up;
- the wait for a cold start, before the job is handed over and while it is, which must end on an interrupt.
Most of them run against a stand-in server (a bare interpreter that sends Ready at once), so that a sweep over
many points does not pay ``import torch`` each time; the real server then shows the next launch works.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest
from launcher_procs import cell_output, gone, signal_at_line, wait_until

import mgpu_helpers as mh
from mgpu_helpers.launcher import job as job_module
from mgpu_helpers.launcher import launch
from mgpu_helpers.launcher.messages import Ready

# They check the process tree under this process: a rank server of its own, not one the fork server forked.
pytestmark = pytest.mark.usefixtures("own_rank_server")


class CellTimeLimit(Exception):
    """What a cell's time limit raises from its SIGALRM handler."""


def _raise_time_limit(signum, frame):
    raise CellTimeLimit("the cell ran past its time limit")


KINDS = {"interrupt": (signal.SIGINT, KeyboardInterrupt), "time limit": (signal.SIGALRM, CellTimeLimit)}


@pytest.fixture(autouse=True)
def time_limit_handler():
    """SIGALRM raises CellTimeLimit, as a timeout helper's handler does; both handlers are checked at the end."""
    before_int = signal.getsignal(signal.SIGINT)
    before_alrm = signal.signal(signal.SIGALRM, _raise_time_limit)
    yield
    sys.settrace(None)
    signal.setitimer(signal.ITIMER_REAL, 0)
    assert signal.getsignal(signal.SIGALRM) is _raise_time_limit, "the SIGALRM handler was not put back"
    signal.signal(signal.SIGALRM, before_alrm)
    assert signal.getsignal(signal.SIGINT) is before_int, "the SIGINT handler was not put back"


# --------------------------------------------------------------------------------------------- helpers


def _servers() -> list[int]:
    """Live rank servers (real or stand-in) started by this process."""
    found = []
    for child in psutil.Process().children():
        try:
            cmd = child.cmdline()
            if child.status() != psutil.STATUS_ZOMBIE and ("mgpu_helpers.launcher.server" in cmd or FAKE in cmd):
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def _assert_state_whole() -> None:
    """A live server has an open socket; there is at most one server process; none is left detached."""
    state = launch.server_state()
    if state.alive:
        assert state.socket_open, "the server is alive but its socket is closed"
        assert set(_servers()) <= {state.pid}, "a server is running that the launcher does not hold"
    assert wait_until(lambda: len(_servers()) <= (1 if launch.server_state().alive else 0), 5), _servers()


# A stand-in rank server: sends the Ready it is given, then waits for the socket to close.
FAKE = (
    "import socket, struct, sys\n"
    "s = socket.socket(fileno=int(sys.argv[1]))\n"
    "data = bytes.fromhex(sys.argv[3])\n"
    "s.sendall(struct.pack('!Q', len(data)) + data)\n"
    "while s.recv(65536):\n"
    "    pass\n"
)


@pytest.fixture
def stand_in_server(monkeypatch):
    """Servers started from here on are stand-ins (started in a few ms, Ready at once); the real one after."""
    mh.shutdown_server()
    real_popen = subprocess.Popen

    def popen(args, *a, **kw):
        if list(args[1:3]) == ["-m", "mgpu_helpers.launcher.server"]:
            args = [sys.executable, "-S", "-c", FAKE, args[3], args[4], pickle.dumps(Ready(0)).hex()]
        return real_popen(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    yield
    mh.shutdown_server()
    monkeypatch.undo()
    assert _servers() == []


def _fds() -> int:
    return psutil.Process().num_fds()


def _assert_next_launch_works_and_nothing_is_left(tmp, fds_before=None):
    assert mh.run_ranks(lambda r, ws: (r, ws), 2, quiet=True, stream=False).values == [(0, 2), (1, 2)]
    under = lambda: [
        c.pid for c in psutil.Process(launch.server_state().pid).children(recursive=True) if not gone(c.pid)
    ]
    assert wait_until(lambda: under() == [], 10), f"left under the server: {under()}"
    assert os.listdir(tmp) == [], "a job folder was left behind"
    if fds_before is not None:
        assert _fds() == fds_before, "file descriptors leaked"
    _assert_state_whole()


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


# --------------------------------------------------------------------------- the server being stopped


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_signal_at_any_line_of_starting_and_stopping_the_server_leaves_it_whole(kind, stand_in_server):
    # prewarm() then shutdown_server(), with the signal at their n-th line: while the old server's socket is
    # closed and its process ended, too. Afterwards a live server always has an open socket, no server is
    # left running unowned, and the only exception is the one injected.
    signum, expected = KINDS[kind]
    hit = 0
    for n in range(1, 90):
        sys.settrace(signal_at_line(n, signum))
        try:
            mh.launcher.prewarm()
            mh.shutdown_server()
        except expected:
            hit += 1
        finally:
            sys.settrace(None)
        _assert_state_whole()
        mh.launcher.prewarm(wait=True)  # the next call works: a server starts and says Ready
        assert launch.server_state().ready
        _assert_state_whole()
        mh.shutdown_server()
        assert _servers() == []
    assert hit > 20, hit


@pytest.mark.parametrize("exc", [KeyboardInterrupt, CellTimeLimit, SystemExit])
def test_an_exception_from_ending_the_server_process_leaves_no_live_server_without_a_socket(
    exc, stand_in_server, monkeypatch
):
    # The old server's process.wait (or its kill) raises: the server must already be detached, and the next
    # call ends the old process and starts a new one.
    for method in ("wait", "kill"):
        mh.launcher.prewarm(wait=True)
        # The fault goes into the server's process object itself (its wait or kill raises), which no public
        # name reaches: the one place the launcher's tests hold its private state.
        old = launch._server.conn.proc
        popen_class = type(old)
        real = getattr(popen_class, method)
        calls = []

        def failing(self, *a, _real=real, **kw):
            if self is old and not calls:
                calls.append(1)
                raise exc("raised while the server was being ended")
            return _real(self, *a, **kw)

        real_poll = popen_class.poll

        def still_running(self, *a, _real=real_poll, **kw):
            # On a fast machine the old server can exit on its own before it is waited for or killed, and
            # the launcher then (rightly) skips the call that raises: keep it "running" until that call.
            return None if self is old and not calls else _real(self, *a, **kw)

        monkeypatch.setattr(popen_class, method, failing)
        monkeypatch.setattr(popen_class, "poll", still_running)
        with pytest.raises(exc):
            mh.shutdown_server()
        monkeypatch.setattr(popen_class, method, real)
        monkeypatch.setattr(popen_class, "poll", real_poll)
        assert not launch.server_state().alive or launch.server_state().pid != old.pid
        _assert_state_whole()
        mh.launcher.prewarm(wait=True)
        assert launch.server_state().pid != old.pid and launch.server_state().ready
        assert wait_until(lambda: gone(old.pid), 5), "the old server was left running"
        mh.shutdown_server()
        assert _servers() == []


# ----------------------------------------------------------------------------- just after Ready was read


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_signal_just_after_ready_was_read_leaves_the_server_ready(kind, stand_in_server):
    # The n-th line after the Ready frame came off the socket. A Ready read but not recorded would make the
    # next call wait for a Ready that never comes again (it waited 120 s, then said the server did not start).
    signum, expected = KINDS[kind]
    for n in range(1, 25):
        mh.shutdown_server()
        sys.settrace(signal_at_line(n, signum, after="recv_msg"))
        try:
            mh.launcher.prewarm(wait=True)
        except expected:
            pass
        finally:
            sys.settrace(None)
        _assert_state_whole()
        assert launch.server_state().pid is None or launch.server_state().ready, f"line {n}: Ready read, not recorded"
        signal.setitimer(signal.ITIMER_REAL, 5.0)  # a guard: a wait for a lost Ready would never end
        try:
            mh.launcher.prewarm(wait=True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        assert launch.server_state().ready


# ------------------------------------------------------------ a second signal after a first, in the clean-up


def _print_then_sleep(rank, world_size):
    print("up", flush=True)
    time.sleep(60)


@pytest.mark.parametrize("kind", list(KINDS))
def test_signals_right_behind_the_first_never_leave_the_clean_up_unprotected(kind, private_tmp, monkeypatch):
    # The first signal comes while the ranks are supervised (when their first line reaches the cell); a
    # second at the n-th line after it (where the wait closes again), a third as the clean-up starts. Only
    # the first is raised; the clean-up ends every rank, closes every descriptor and removes the job folder.
    signum, expected = KINDS[kind]
    mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False)  # server up and ready
    fds_before = _fds()
    outside = signal.getsignal(signum)
    real_finish = job_module.Job.finish

    def finish_with_a_signal_first(self):
        signal.raise_signal(signum)
        real_finish(self)

    monkeypatch.setattr(job_module.Job, "finish", finish_with_a_signal_first)
    for n in range(1, 12):
        second = [n]

        def handler(s, frame):
            if second:  # the first delivery: arm the second signal, then raise
                sys.settrace(signal_at_line(second.pop(), signum))
            raise expected(f"signal {s}")

        def write(text):  # the cell's output: the first line triggers the first signal
            if "up" in text:
                signal.raise_signal(signum)

        signal.signal(signum, handler)
        try:
            with cell_output(write), pytest.raises(expected):
                mh.run_ranks(_print_then_sleep, 2, timeout=30, quiet=True)
        finally:
            sys.settrace(None)
            signal.signal(signum, outside)
        assert os.listdir(private_tmp) == [], f"n={n}: the job folder was left behind"
        assert _fds() == fds_before, f"n={n}: file descriptors leaked"
    monkeypatch.undo()
    _assert_next_launch_works_and_nothing_is_left(private_tmp, fds_before)


@pytest.mark.parametrize("every_write", [False, True])
def test_systemexit_from_the_cells_output_fails_that_launch_only(every_write, private_tmp):
    # A widget behind sys.stdout whose callback raises SystemExit, once or on every write (the clean-up reads
    # the ranks' last lines and writes them too).
    mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False)
    fds_before = _fds()
    raised = []

    def widget(text):
        if every_write or not raised:
            raised.append(text)
            raise SystemExit("closed by a widget callback")

    def chatty(rank, world_size):
        for i in range(50):
            print("line", i, flush=True)
        time.sleep(60)

    with cell_output(widget), pytest.raises(SystemExit):
        mh.run_ranks(chatty, 2, timeout=30, quiet=True)
    assert raised
    _assert_next_launch_works_and_nothing_is_left(private_tmp, fds_before)


# --------------------------------------------------------------------------------------------- cold start


class _StopTheNextServer(threading.Thread):
    """Waits for a new rank server to appear, stops it (SIGSTOP: its import torch cannot finish), then presses
    interrupt. ``resume()`` lets the server go on; it also does so by itself after ``guard_s`` so that a
    launcher that cannot be interrupted still ends (then ``resumed_first`` says so)."""

    def __init__(self, old_pids, guard_s=20.0):
        super().__init__(daemon=True)
        self.old = set(old_pids)
        self.guard_s = guard_s
        self.server = None
        self.pressed = threading.Event()
        self.done = threading.Event()
        self.resumed_first = False

    def run(self):
        deadline = time.monotonic() + 60
        while self.server is None and time.monotonic() < deadline:
            new = [p for p in _servers() if p not in self.old]
            if new:
                self.server = new[0]
                os.kill(self.server, signal.SIGSTOP)
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)
        self.pressed.set()
        if not self.done.wait(self.guard_s):
            self.resumed_first = True
        self.resume()

    def resume(self):
        self.done.set()
        if self.server is not None:
            try:
                os.kill(self.server, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _interrupted_while_the_server_is_stopped(start_launch):
    stopper = _StopTheNextServer(_servers())
    stopper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            start_launch()
    finally:
        resumed_first = stopper.resumed_first
        stopper.resume()
        stopper.join(30)
    assert stopper.server is not None, "no new server was started"
    assert not resumed_first, "the interrupt was only taken after the server had finished starting"
    return stopper.server


def test_an_interrupt_ends_the_wait_for_a_cold_start_and_the_next_launch_starts_cleanly(private_tmp):
    mh.shutdown_server()
    fds_before = _fds()
    server = _interrupted_while_the_server_is_stopped(
        lambda: mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False)
    )
    _assert_state_whole()
    assert _fds() == fds_before + (1 if launch.server_state().alive else 0)  # at most the server's socket
    _assert_next_launch_works_and_nothing_is_left(private_tmp)
    assert launch.server_state().pid == server  # the server kept importing; the next launch used it


def test_a_server_replaced_just_before_the_job_is_handed_over_is_waited_for_interruptibly(private_tmp, monkeypatch):
    # The server is ready, then (another thread's shutdown_server, say) goes just before this launch hands
    # its job over: the launch waits for a new one's cold start, and that wait too must end on an interrupt.
    mh.run_ranks(lambda r, ws: r, 1, quiet=True, stream=False)
    real_mkdtemp = tempfile.mkdtemp
    once = []

    def mkdtemp(*a, **kw):  # runs as the job is prepared, after the server was found ready
        if not once:
            once.append(1)
            mh.shutdown_server()
        return real_mkdtemp(*a, **kw)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    _interrupted_while_the_server_is_stopped(lambda: mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False))
    monkeypatch.undo()
    _assert_state_whole()
    _assert_next_launch_works_and_nothing_is_left(private_tmp)
