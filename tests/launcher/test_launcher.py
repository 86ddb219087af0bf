"""The rank launcher survives the failures notebook launchers are known for; each test is named after one.

All of these run on the CPU with gloo ranks; tests/launcher/test_launcher_gpu.py repeats the essential ones with NCCL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest
from launcher_procs import ROOT, cell_output, pids_from, printed_pids, start_kernel, wait_gone

import mgpu_helpers as mh
from mgpu_helpers.launcher import flight, launch

# They check the process tree under this process: a rank server of its own, not one the fork server forked.
pytestmark = pytest.mark.usefixtures("own_rank_server")


def _allreduce_rank(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.tensor([rank])
    dist.all_reduce(t)
    return int(t.item())


# ---------------------------------------------------------------------------------------------- the basics


def test_all_reduce_of_ranks_gives_six_on_four_ranks():
    res = mh.run_ranks(_allreduce_rank, 4, quiet=True)
    assert res.values == [6, 6, 6, 6]
    assert res.backend == "gloo"
    assert len(res.seconds) == 4 and all(s >= 0 for s in res.seconds)


def test_cell_defined_closure_runs():
    offset = 100  # captured by the closure, sent by value

    def rank_fn(rank, world_size):
        return rank + offset

    assert mh.run_ranks(rank_fn, 3, quiet=True).values == [100, 101, 102]


def test_lambda_runs_with_args():
    res = mh.run_ranks(lambda rank, ws, a, b: (rank, ws, a * b), 2, args=(3, 4), quiet=True)
    assert res.values == [(0, 2, 12), (1, 2, 12)]


def test_values_come_back_in_rank_order_with_tensors_on_cpu():
    def rank_fn(rank, world_size):
        import torch

        time.sleep(0.2 * (world_size - rank))  # the last rank finishes first
        return {"rank": rank, "t": torch.full((2,), float(rank), device=mh.rank_device())}

    res = mh.run_ranks(rank_fn, 3, quiet=True)
    assert [v["rank"] for v in res.values] == [0, 1, 2]
    assert all(v["t"].device.type == "cpu" and v["t"].tolist() == [r, r] for r, v in enumerate(res.values))


def test_init_false_lets_fn_join_the_group_itself():
    def rank_fn(rank, world_size):
        import torch.distributed as dist

        assert not dist.is_initialized()
        dist.init_process_group(
            "gloo",
            init_method=os.environ["MGPU_INIT_METHOD"],
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
        return dist.get_rank(), os.environ["MASTER_ADDR"]

    assert mh.run_ranks(rank_fn, 2, init=False, quiet=True).values == [(0, "127.0.0.1"), (1, "127.0.0.1")]


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("world_size", [0, -1, 2.5, "4", True, 10_000])
def test_wrong_world_size_is_a_clear_error(world_size):
    with pytest.raises(mh.LaunchError, match="world_size"):
        mh.run_ranks(_allreduce_rank, world_size)


def test_wrong_signature_fails_before_launch():
    with pytest.raises(mh.LaunchError, match=r"fn\(rank, world_size, \*args\)"):
        mh.run_ranks(lambda rank: rank, 2)


def test_unpicklable_function_fails_before_launch(tmp_path):
    lock = threading.Lock()
    marker = tmp_path / "ran"

    def rank_fn(rank, world_size):
        marker.write_text("a rank started")
        with lock:
            return rank

    with pytest.raises(mh.LaunchError, match="cannot be sent to the rank processes"):
        mh.run_ranks(rank_fn, 2)
    assert not marker.exists()


def test_too_many_nccl_ranks_for_the_gpus_is_a_clear_error():
    gpus = mh.hardware.machine().gpu_count
    with pytest.raises(mh.LaunchError, match="one GPU per rank"):
        mh.run_ranks(_allreduce_rank, gpus + 1, backend="nccl")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(mh.LaunchError, match="backend must be"):
        mh.run_ranks(_allreduce_rank, 2, backend="mpi")


# ---------------------------------------------------------------------------------------------- failures


def test_rank_exception_kills_peers():
    def rank_fn(rank, world_size):
        print("pid", os.getpid(), flush=True)
        if rank == 1:
            time.sleep(0.3)
            raise ValueError("bad shard on rank 1")
        time.sleep(60)

    # The peers sleep past the timeout: a RankError (not RankTimeout) shows they were ended when rank 1 failed.
    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 3, timeout=50, quiet=True)
    err = info.value
    assert not isinstance(err, mh.RankTimeout)
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert "bad shard on rank 1" in str(err) and "Traceback" in str(err)
    assert isinstance(err.original, ValueError)
    pids = pids_from(err.outputs)
    assert len(pids) == 3 and wait_gone(pids)


def test_rank_os_exit_reported_with_last_output():
    def rank_fn(rank, world_size):
        print("pid", os.getpid(), flush=True)
        if rank == 0:
            print("about to leave", flush=True)
            os._exit(3)
        time.sleep(60)

    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, timeout=50, quiet=True)
    assert info.value.rank == 0 and info.value.exc_type is None
    assert "exited with code 3" in str(info.value) and "about to leave" in str(info.value)
    assert wait_gone(pids_from(info.value.outputs))


@pytest.mark.parametrize("how,signame", [("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_rank_killed_by_signal_is_reported(how, signame):
    def rank_fn(rank, world_size):
        print("pid", os.getpid(), flush=True)
        if rank == 1:
            if how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            import ctypes

            ctypes.string_at(0)  # read address 0: a real segmentation fault
        time.sleep(60)

    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, timeout=50, quiet=True)
    assert info.value.rank == 1 and f"killed by {signame}" in str(info.value)
    assert wait_gone(pids_from(info.value.outputs))


def test_rank_returning_early_while_peers_wait_is_reported():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        if rank == 0:
            dist.recv(torch.zeros(3), src=1)  # rank 1 never sends
        return rank

    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, timeout=8, quiet=True)
    text = str(info.value)
    assert info.value.rank == 0
    assert "[1] had already returned" in text or "[1] had already finished" in text
    assert info.value.results.values[1] == 1  # what rank 1 returned is not lost


def test_unreturnable_value_is_reported():
    with pytest.raises(mh.RankError, match="could not be sent back"):
        mh.run_ranks(lambda rank, ws: threading.Lock(), 2, quiet=True)


def _send_first(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.arange(3.0)
    dist.send(t, dst=1 - rank)  # both send first: gloo's send blocks until received
    dist.recv(t, src=1 - rank)


def test_deadlock_diagnosed_at_timeout_with_each_rank_stack():
    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(_send_first, 2, timeout=3, quiet=True)
    err = info.value
    assert set(err.stacks) == {0, 1}
    assert all("in send" in s and "_send_first" in s for s in err.stacks.values())
    assert all(w.startswith("dist.send") for w in err.waiting_in.values())
    assert "deadlock" in str(err)


def test_each_stuck_ranks_stack_comes_whole_from_its_dump_thread():
    # The signal-handler dump (faulthandler on SIGUSR1) is written a line at a time and was once read half
    # written on a loaded host. Here it cannot happen at all: the stacks must still come, whole.
    def ignore_usr1_then_deadlock(rank, world_size):
        import signal

        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        _send_first(rank, world_size)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(ignore_usr1_then_deadlock, 2, timeout=3, quiet=True)
    err = info.value
    assert set(err.stacks) == {0, 1}
    for stack in err.stacks.values():
        assert "in ignore_usr1_then_deadlock" in stack and "mgpu_helpers/launcher/rank_process.py" in stack
    assert all(w.startswith("dist.send") for w in err.waiting_in.values())


def test_mismatched_collectives_diagnosed_at_timeout():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.recv(t, src=0)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(rank_fn, 2, timeout=3, quiet=True)
    assert info.value.waiting_in[0].startswith("dist.all_reduce")
    assert info.value.waiting_in[1].startswith("dist.recv")
    assert "different collectives" in str(info.value)


def test_mismatched_collectives_named_by_torch_debug_mode():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        dist.all_reduce(t) if rank == 0 else dist.broadcast(t, src=0)

    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, timeout=30, debug=True, quiet=True)
    assert not isinstance(info.value, mh.RankTimeout)
    assert "Detected mismatch between collectives" in str(info.value)


def test_kernel_interrupt_ends_every_rank_and_relaunch_works():
    env_before = dict(os.environ)
    handler_before = signal.getsignal(signal.SIGINT)
    printed = []

    def rank_fn(rank, world_size):
        print("pid", os.getpid(), flush=True)
        time.sleep(60)

    def write(text):
        printed.append(text)
        if text.count("pid ") and sum(t.count("pid ") for t in printed) == 2:
            # Both ranks are up: press "interrupt" the way Jupyter does (SIGINT to the kernel).
            os.kill(os.getpid(), signal.SIGINT)

    # The ranks sleep past the timeout: KeyboardInterrupt (not RankTimeout) shows it was taken at once.
    with cell_output(write), pytest.raises(KeyboardInterrupt):
        mh.run_ranks(rank_fn, 2, timeout=50)
    pids = [int(part.split()[0]) for text in printed for part in text.split("pid ")[1:]]
    assert len(pids) == 2 and wait_gone(pids, 5)
    assert dict(os.environ) == env_before and signal.getsignal(signal.SIGINT) is handler_before
    assert mh.run_ranks(_allreduce_rank, 2, quiet=True).values == [1, 1]


def test_a_cold_first_launch_imports_torch_here_while_the_server_imports_its_own():
    # A tensor in a result needs torch in the notebook's process to be unpickled: imported only then, it would
    # come after the server's import instead of beside it.
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import mgpu_helpers as mh
        before = "torch" in sys.modules
        mh.run_ranks(lambda rank, world_size: rank, 1, quiet=True)
        print(before, "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True"]


def test_ranks_die_with_the_kernel(tmp_path):
    kernel = start_kernel(
        tmp_path,
        """
        import os, time
        import mgpu_helpers as mh
        def rank_fn(rank, world_size):
            print("pid", os.getpid(), flush=True)
            time.sleep(120)
        if __name__ == "__main__":
            mh.run_ranks(rank_fn, 2, timeout=100)
        """,
    )
    pids = [pid for (pid,) in printed_pids(kernel, 2)]
    server = [c.pid for c in psutil.Process(kernel.pid).children()]
    kernel.kill()  # like a kernel that dies or is restarted
    kernel.wait()
    assert wait_gone(pids + server, 10)


# ---------------------------------------------------------------------------------------------- hygiene


def _our_tree_listening() -> list:
    procs = [psutil.Process()] + psutil.Process().children(recursive=True)
    found = []
    for p in procs:
        try:
            found += [c for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            pass
    return found


def _fail_or_exit(rank, world_size, how):
    if rank == 1 and how == "raise":
        raise RuntimeError("planned failure")
    if rank == 1 and how == "exit":
        os._exit(5)
    return rank


def test_a_launch_whose_ranks_all_returned_does_not_wait_for_them_to_exit_and_they_still_go(monkeypatch):
    from mgpu_helpers.launcher.job import Job

    mh.run_ranks(_allreduce_rank, 2, quiet=True)  # server up
    waited = []
    real_wait = Job._wait_leader
    monkeypatch.setattr(Job, "_wait_leader", lambda self, s: (waited.append(s), real_wait(self, s)))
    res = mh.run_ranks(lambda rank, ws: (rank, os.getpid()), 2, quiet=True, stream=False)
    assert [v[0] for v in res.values] == [0, 1]
    assert waited == []  # every rank had answered: the leader ends them, the cell goes on
    assert wait_gone([pid for _, pid in res.values], 5)
    with pytest.raises(mh.RankError):  # a rank that fails: its peers are ended before the error is raised
        mh.run_ranks(_fail_or_exit, 2, args=("raise",), quiet=True, stream=False)
    assert waited


def test_many_launches_leave_no_process_fd_tempfile_or_port(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a temp folder of our own to watch
    mh.run_ranks(_allreduce_rank, 2, quiet=True)  # server up before the baseline
    me = psutil.Process()
    fds_before = me.num_fds()
    # What runs before the launches (the rank server; a fork server an earlier test of this process started)
    # stays; a launch leaves nothing beside it.
    before = {c.pid for c in me.children(recursive=True)}
    server_children = lambda: [c for c in me.children(recursive=True) if c.pid not in before]
    for i in range(36):  # six rounds of four good launches, a raise and an exit: a leak per launch adds up
        how = ("ok", "ok", "ok", "ok", "raise", "exit")[i % 6]
        if how == "ok":
            assert mh.run_ranks(_fail_or_exit, 2, args=(how,), quiet=True, stream=False).values == [0, 1]
        else:
            with pytest.raises(mh.RankError):
                mh.run_ranks(_fail_or_exit, 2, args=(how,), quiet=True, stream=False)
    end = time.monotonic() + 5
    while server_children() and time.monotonic() < end:
        time.sleep(0.05)
    assert server_children() == []  # no orphan, no zombie
    assert me.num_fds() == fds_before
    # Nothing is left but the flight recorder's dumps that a failed launch keeps for the learner, a few at most.
    kept = [n for n in os.listdir(tmp_path) if n.startswith("mgpu-flight-")]
    assert [n for n in os.listdir(tmp_path) if n not in kept] == []
    hangs = [[m for m in os.listdir(tmp_path / n) if not m.endswith(flight.COPY_SUFFIX)] for n in kept]
    assert all(len(h) <= flight.KEEP_LAST for h in hangs)
    assert _our_tree_listening() == []


def test_nothing_listens_outside_loopback_during_a_launch():
    def rank_fn(rank, world_size):
        import psutil
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))
        return [(c.laddr.ip, c.status) for c in psutil.Process().net_connections(kind="inet")]

    res = mh.run_ranks(rank_fn, 3, quiet=True)
    seen = [c for per_rank in res.values for c in per_rank]
    assert seen, "gloo ranks should hold connections to each other"
    assert all(ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for ip, _ in seen), seen


def test_two_launches_at_once():
    results, errors = {}, []

    def launch_in_thread(k):
        try:
            results[k] = mh.run_ranks(lambda r, ws, k=k: (k, r), 2, quiet=True, stream=False).values
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=launch_in_thread, args=(k,)) for k in range(2)]
    other_notebook = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import mgpu_helpers as mh\n"
            "if __name__ == '__main__':\n"
            "    print(mh.run_ranks(lambda r, ws: r * 10, 2, quiet=True, stream=False).values)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert results == {0: [(0, 0), (0, 1)], 1: [(1, 0), (1, 1)]}
    assert other_notebook.communicate(timeout=60)[0].strip() == "[0, 10]"


def test_output_of_c_libraries_is_not_lost_when_the_rank_exits():
    # NCCL's log and CUDA's printf write through C's stdout, which is block-buffered on a pipe and not
    # flushed by os._exit: without care the last few KiB (NCCL's transport lines) never reach the cell.
    def rank_fn(rank, world_size):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.printf(b"from C, first line\n")
        libc.printf(b"from C, rank %d\n", ctypes.c_int(rank))
        return rank

    res = mh.run_ranks(rank_fn, 2, stream=False, quiet=True)
    assert res.outputs == [["from C, first line", "from C, rank 0"], ["from C, first line", "from C, rank 1"]]


def test_output_is_streamed_live_with_rank_prefix(tmp_path):
    # Each rank prints a line, then waits until the cell has shown both ranks' first lines (a file the cell
    # creates): without live streaming it would wait forever and the launch would time out.
    seen = tmp_path / "seen"
    lines = []

    def write(text):
        lines.extend(text.splitlines())
        if sum(ln.endswith("first line") for ln in lines) == 2:
            seen.touch()

    def rank_fn(rank, world_size):
        print("first line", flush=True)
        while not seen.exists():
            time.sleep(0.01)
        print("second", "line")  # not flushed by hand: ranks are line-buffered
        return rank

    with cell_output(write):
        assert mh.run_ranks(rank_fn, 2, timeout=30, quiet=True).values == [0, 1]
    assert sorted(lines) == [
        "[rank 0] first line",
        "[rank 0] second line",
        "[rank 1] first line",
        "[rank 1] second line",
    ]


def test_kernel_environment_untouched():
    before = dict(os.environ)
    res = mh.run_ranks(
        lambda r, ws: (os.environ.get("COURSE_FLAG"), os.environ["RANK"]), 2, env={"COURSE_FLAG": "on"}, quiet=True
    )
    assert res.values == [("on", "0"), ("on", "1")]
    assert dict(os.environ) == before


def test_cpu_ranks_are_pinned_to_cores_by_rank_not_left_to_the_scheduler():
    # Left to the scheduler, four ranks on two cores can land three on one core: a rank with half the work
    # then finishes last and the straggler lesson measures placement, not shards.
    from mgpu_helpers.launcher.ranks import cpu_placement, physical_cores

    cores = physical_cores()
    for n in (1, 2, 4, 8):
        placed = [set(cpu_placement(r, n)) for r in range(n)]
        if len(cores) >= n:  # disjoint runs of whole cores, equal in size
            assert all(a.isdisjoint(b) for i, a in enumerate(placed) for b in placed[i + 1 :])
            assert len({len(p) for p in placed}) == 1
        else:  # round robin: rank r on core r % cores
            assert placed == [set(cores[r % len(cores)]) for r in range(n)]
    res = mh.run_ranks(lambda r, ws: sorted(os.sched_getaffinity(0)), 4, quiet=True)
    assert res.values == [sorted(cpu_placement(r, 4)) for r in range(4)]


def test_repeat_launch_reuses_the_preloaded_server():
    def lineage(rank, world_size):
        import sys

        leader = psutil.Process(os.getppid())
        return leader.ppid(), "torch" in sys.modules

    first = mh.run_ranks(lineage, 2, quiet=True).values
    second = mh.run_ranks(lineage, 2, quiet=True).values
    server = launch.server_state().pid
    assert {v[0] for v in first + second} == {server}
    assert all(v[1] for v in first)
    cmd = " ".join(psutil.Process(server).cmdline())
    assert "mgpu_helpers.launcher.server" in cmd  # a fresh interpreter, never a fork of this process


def test_server_restarts_after_being_killed():
    mh.run_ranks(_allreduce_rank, 2, quiet=True)
    server = psutil.Process(launch.server_state().pid)
    server.kill()
    server.wait(10)
    assert mh.run_ranks(_allreduce_rank, 2, quiet=True).values == [1, 1]


def _has_dynamo(rank, world_size):
    import sys

    return "torch._dynamo" in sys.modules  # checked before anything in the rank imports it


def test_an_idle_server_imports_dynamo_on_its_own(monkeypatch):
    monkeypatch.setenv("MGPU_IDLE_PRELOAD_S", "0.2")
    launch.shutdown_server()
    deadline = time.monotonic() + 60
    while not mh.run_ranks(_has_dynamo, 1, quiet=True).values[0]:
        assert time.monotonic() < deadline, "the idle server never imported torch._dynamo"
        time.sleep(0.5)
    launch.shutdown_server()
