"""The launcher under faults: interrupts at any moment, a dead rank server or leader, threads at once.

Every test here ends by checking that nothing of the launch is left: no process under the rank server but
the server, no file descriptor of this process, no job folder. All run on the CPU with gloo ranks.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import threading
import time

import psutil
import pytest
from launcher_procs import cell_output, gone, pids_from, signal_at_line, wait_gone, wait_until

import mgpu_helpers as mh
from mgpu_helpers.launcher import launch

# They check the process tree under this process: a rank server of its own, not one the fork server forked.
pytestmark = pytest.mark.usefixtures("own_rank_server")


def _server_pid() -> int:
    mh.run_ranks(lambda r, ws: r, 1, quiet=True, stream=False)  # up and ready
    return launch.server_state().pid


def _under_server() -> list[int]:
    """Processes under the rank server (its jobs' leaders and ranks), the server itself excluded."""
    pid = launch.server_state().pid
    if pid is None:
        return []
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True) if not gone(c.pid)]
    except psutil.NoSuchProcess:
        return []


def _sleep_and_fail(rank, world_size):
    import torch.distributed as dist

    print("pid", os.getpid(), flush=True)
    dist.barrier()  # every rank has said its pid
    if rank == 1:
        raise ValueError("rank 1 gives up")
    time.sleep(60)


def _assert_failing_launch_ends_its_peers_quickly():
    # The peers sleep past the timeout: a RankError, not a RankTimeout, shows they were ended when rank 1 failed.
    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(_sleep_and_fail, 3, timeout=40, quiet=True, stream=False)
    assert not isinstance(info.value, mh.RankTimeout), "a failing rank's peers were not ended"
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    pids = pids_from(info.value.outputs)
    assert len(pids) == 3 and wait_gone(pids, 5)


@pytest.fixture
def watched(tmp_path, monkeypatch):
    """A private temp folder for the jobs, and this process's fd count once the server is up."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _server_pid()
    handler = signal.getsignal(signal.SIGINT)
    yield dict(tmp=tmp_path, fds=psutil.Process().num_fds())
    assert signal.getsignal(signal.SIGINT) is handler, "the SIGINT handler was not put back"


def _assert_nothing_left(watched):
    assert wait_until(lambda: _under_server() == [], 10), f"left under the server: {_under_server()}"
    assert os.listdir(watched["tmp"]) == [], "a job folder was left behind"
    assert psutil.Process().num_fds() == watched["fds"], "file descriptors leaked"


# --------------------------------------------------------------------------------------------- interrupts


def _quick(rank, world_size):
    time.sleep(0.05)
    return rank


def test_an_interrupt_at_any_line_of_a_launch_leaves_nothing_and_later_launches_work(watched):
    # Every 4th line of set-up (sending the job, reading the reply, creating the pipes), then lines at random
    # in supervision and clean-up. After each: nothing left, and the next launch is answered correctly.
    rng = random.Random(13)
    moments = list(range(1, 280, 4)) + sorted(rng.sample(range(280, 900), 16))
    outcomes = {"interrupted": 0, "returned": 0}
    for k in moments:
        sys.settrace(signal_at_line(k, signal.SIGINT))
        try:
            res = mh.run_ranks(_quick, 2, quiet=True, stream=False)
            assert res.values == [0, 1]
            outcomes["returned"] += 1
        except KeyboardInterrupt:
            outcomes["interrupted"] += 1
        finally:
            sys.settrace(None)
        assert mh.run_ranks(lambda r, ws, k=k: (k, r), 2, quiet=True, stream=False).values == [(k, 0), (k, 1)]
    assert outcomes["interrupted"] > len(moments) // 2, outcomes
    _assert_failing_launch_ends_its_peers_quickly()
    _assert_nothing_left(watched)


def test_sigint_from_a_timer_at_random_moments_of_many_launches(watched):
    stop = threading.Event()
    rng = random.Random(7)
    sent = [0]

    def press_interrupt():
        while not stop.wait(rng.uniform(0.02, 0.35)):
            os.kill(os.getpid(), signal.SIGINT)
            sent[0] += 1

    presser = threading.Thread(target=press_interrupt, daemon=True)
    interrupted = returned = 0
    presser.start()
    try:
        while interrupted + returned < 40:
            try:
                try:
                    assert mh.run_ranks(_quick, 2, quiet=True, stream=False).values == [0, 1]
                    returned += 1
                except KeyboardInterrupt:
                    interrupted += 1
            except KeyboardInterrupt:  # landed in this loop's own code: not a launch
                pass
    finally:
        stop.set()
        presser.join()
    try:
        time.sleep(0.2)  # a last signal still on its way
    except KeyboardInterrupt:
        pass
    assert sent[0] > 20 and interrupted > 5, (sent, interrupted, returned)
    _assert_failing_launch_ends_its_peers_quickly()
    _assert_nothing_left(watched)


# --------------------------------------------------------------------------------------- dead server, leader


class _WhenRanksAreUp:
    """The cell's output: once every rank has printed its pid, calls ``act(pids)`` (in the cell's thread)."""

    def __init__(self, world_size, act):
        self.world_size, self.act, self.pids = world_size, act, []

    def write(self, text):
        for line in text.splitlines():
            if " pid " in line:
                self.pids.append(int(line.split(" pid ")[1]))
                if len(self.pids) == self.world_size:
                    self.act(self.pids)


def _print_pid_and_sleep(rank, world_size):
    print("pid", os.getpid(), flush=True)
    time.sleep(60)


def _launch_with_output_to(cell, world_size=2):
    # The ranks sleep past the timeout: an error other than RankTimeout shows the fault was noticed.
    with cell_output(cell.write):
        return mh.run_ranks(_print_pid_and_sleep, world_size, timeout=30, quiet=True)


def test_server_killed_mid_job_raises_launch_error_before_the_timeout_and_next_launch_starts_a_new_one(watched):
    old_server = _server_pid()
    with pytest.raises(mh.LaunchError) as info:
        _launch_with_output_to(_WhenRanksAreUp(2, lambda pids: os.kill(old_server, signal.SIGKILL)))
    text = str(info.value)
    assert "rank server died" in text and "SIGKILL" in text and "next launch starts a new rank server" in text
    res = mh.run_ranks(lambda r, ws: os.getppid(), 2, quiet=True, stream=False)
    assert launch.server_state().pid != old_server and gone(old_server)
    assert len(set(res.values)) == 1  # both ranks under one (new) leader
    _assert_nothing_left(watched)


def test_leader_killed_mid_job_is_reported_and_its_group_is_never_signalled_after(watched, monkeypatch):
    signalled = []
    real_killpg = os.killpg
    monkeypatch.setattr(
        os, "killpg", lambda pgid, sig: (signalled.append((len(killed), pgid, sig)), real_killpg(pgid, sig))[1]
    )
    killed = []

    def kill_leader(pids):
        leader = psutil.Process(pids[0]).parent()  # the ranks' parent: the job's leader
        killed.append(leader.pid)
        leader.kill()

    with pytest.raises(mh.LaunchError, match="leader process of this launch"):
        _launch_with_output_to(_WhenRanksAreUp(2, kill_leader))
    assert killed and [s for s in signalled if s[1] == killed[0] and s[0] >= 1] == []
    assert mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False).values == [0, 1]
    _assert_nothing_left(watched)


# ----------------------------------------------------------------------------------------------- threads


def test_server_started_from_a_short_lived_thread_outlives_it():
    # PR_SET_PDEATHSIG fires when the *thread* that forked the server exits: it must not be this one.
    # The thread launches (so the server is up and has asked for PDEATHSIG by then), then ends.
    mh.shutdown_server()
    starter = threading.Thread(target=mh.run_ranks, args=(lambda r, ws: r, 1), kwargs=dict(quiet=True))
    starter.start()
    starter.join()
    server = launch.server_state().pid
    time.sleep(1.0)
    assert not gone(server), "the rank server died with the thread that started it"
    assert mh.run_ranks(lambda r, ws: r, 2, quiet=True, stream=False).values == [0, 1]
    assert launch.server_state().pid == server


def test_threads_starting_launches_at_once_each_get_their_own_answer(watched):
    mh.shutdown_server()  # they also race to start the server
    results, errors = {}, []
    barrier = threading.Barrier(6)

    def launch_in_thread(k):
        try:
            barrier.wait()
            for i in range(3):
                got = mh.run_ranks(lambda r, ws, k=k, i=i: (k, i, r), 2, quiet=True, stream=False).values
                results[(k, i)] = got
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=launch_in_thread, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert results == {(k, i): [(k, i, 0), (k, i, 1)] for k in range(6) for i in range(3)}
    _assert_nothing_left(watched)
