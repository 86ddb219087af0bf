"""What a launch meets in real use: grandchildren, floods of output, big and unsendable results, a kernel
restart, a hang diagnosed by torch's flight recorder. All on the CPU with gloo ranks."""

from __future__ import annotations

import os
import pickle
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import time

import psutil
import pytest
from launcher_procs import cell_output, gone, printed_pids, start_kernel, wait_gone

import mgpu_helpers as mh
from mgpu_helpers.launcher import flight

# They check the process tree under this process: a rank server of its own, not one the fork server forked.
pytestmark = pytest.mark.usefixtures("own_rank_server")


def _settled_server() -> None:
    """A server that is up and has served a launch: a launch timed after this pays no start-up."""
    mh.run_ranks(lambda rank, world_size: rank, 1, quiet=True, stream=False)


@pytest.mark.parametrize("own_session", [False, True])
def test_a_grandchild_holding_the_output_open_does_not_hold_the_launch(own_session):
    # The rank returns, but a child it started still holds the rank's stdout (the launch's output pipe).
    # In its own session it is out of the job's process group too: the leader, a child subreaper, still
    # finds it. The launch must take about as long as one without grandchildren, timed just before.
    def rank_fn(rank, world_size):
        child = subprocess.Popen(["sleep", "300"], start_new_session=own_session)
        return child.pid

    def plain(rank, world_size):
        subprocess.run(["true"])
        return os.getpid()

    _settled_server()
    plain_s, with_grandchild_s = [], []
    for _ in range(3):  # interleaved, so both kinds meet the same load
        t0 = time.monotonic()
        mh.run_ranks(plain, 2, quiet=True, stream=False)
        plain_s.append(time.monotonic() - t0)
        t0 = time.monotonic()
        res = mh.run_ranks(rank_fn, 2, quiet=True, stream=False)
        with_grandchild_s.append(time.monotonic() - t0)
        assert wait_gone(res.values, 5), "the grandchildren outlived the launch"
    # Waiting for the grandchildren to let go of the output would cost every such launch at least the
    # launcher's 2 s limit on reading what is left; the margin is half of that, against launches of the same run.
    assert statistics.median(with_grandchild_s) < statistics.median(plain_s) + 1.0, (with_grandchild_s, plain_s)


def test_a_flood_of_output_does_not_stall_the_launch():
    lines = 200_000

    def rank_fn(rank, world_size):
        import sys

        for i in range(lines):
            sys.stdout.write(f"line {i} of rank {rank}\n")
        return rank

    written = []
    with cell_output(lambda text: written.append(text.count("\n"))):  # a cell as fast as it can take lines
        t0 = time.monotonic()
        res = mh.run_ranks(rank_fn, 2, timeout=120, quiet=True)
        elapsed = time.monotonic() - t0
    assert res.values == [0, 1]
    assert sum(written) == 2 * lines  # every line reached the cell
    assert [o[-1] for o in res.outputs] == [f"line {lines - 1} of rank {r}" for r in range(2)]
    assert all(len(o) == 2000 for o in res.outputs)  # what is kept is bounded
    assert elapsed < 90, elapsed


def test_a_return_value_of_hundreds_of_megabytes_comes_back_whole():
    def rank_fn(rank, world_size):
        import numpy as np

        if rank == 0:
            return np.arange(40_000_000, dtype=np.float64)  # 320 MB
        return rank

    res = mh.run_ranks(rank_fn, 2, timeout=120, quiet=True, stream=False)
    big = res.values[0]
    assert big.nbytes == 320_000_000 and big[0] == 0 and big[-1] == 39_999_999
    assert float(big[::1_000_000].sum()) == sum(range(0, 40_000_000, 1_000_000))
    assert res.values[1] == 1


def test_an_unpicklable_return_value_names_the_rank_and_what_could_not_be_sent():
    def rank_fn(rank, world_size):
        import threading

        return threading.Lock() if rank == 1 else rank

    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, quiet=True, stream=False)
    text = str(info.value)
    assert info.value.rank == 1
    assert "rank 1 raised TypeError while sending the result (a _thread.lock)" in text
    assert "could not be sent back" in text


def test_server_and_ranks_are_gone_within_seconds_when_the_kernel_restarts(tmp_path):
    # A stand-in for a Jupyter kernel: it prewarms from a worker thread (as setup() may be called from one),
    # launches, and is killed the way "restart kernel" kills it.
    kernel = start_kernel(
        tmp_path,
        """
        import os, threading, time
        import mgpu_helpers as mh
        def rank_fn(rank, world_size):
            print("pid", os.getpid(), flush=True)
            time.sleep(120)
        if __name__ == "__main__":
            t = threading.Thread(target=mh.launcher.prewarm)
            t.start(); t.join()
            mh.run_ranks(rank_fn, 2, timeout=100)
        """,
    )
    pids = [pid for (pid,) in printed_pids(kernel, 2)]
    tree = [c.pid for c in psutil.Process(kernel.pid).children(recursive=True)]
    assert set(pids) <= set(tree)
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    assert wait_gone(tree, 5), [p for p in tree if not gone(p)]


def test_a_hang_shows_each_ranks_last_completed_and_stuck_collective_from_the_flight_recorder():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        dist.all_reduce(t)
        dist.all_reduce(t)
        if rank == 0:
            dist.all_reduce(t)  # rank 1 calls broadcast instead: the third collective never matches
        else:
            dist.broadcast(t, src=0)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(rank_fn, 2, timeout=4, quiet=True, stream=False)
    err = info.value
    assert err.collectives == {
        0: {"last_completed": (2, "all_reduce"), "stuck_in": (3, "all_reduce")},
        1: {"last_completed": (2, "all_reduce"), "stuck_in": (3, "broadcast")},
    }
    assert "flight recorder: last completed #2 all_reduce, stuck in #3 broadcast" in str(err)
    assert set(err.stacks) == {0, 1} and all("rank_fn" in s for s in err.stacks.values())
    # The dumps themselves outlive the launch, one file per rank, and torch's own analyzer reads the folder.
    assert sorted(os.listdir(err.flight_dumps)) == ["fr_trace_rank_0", "fr_trace_rank_1"]
    assert err.flight_dumps in str(err)
    with open(os.path.join(err.flight_dumps, "fr_trace_rank_1"), "rb") as f:
        raw = pickle.load(f)
    assert [(e["collective_seq_id"], e["profiling_name"]) for e in raw["entries"]][-1] == (3, "gloo:broadcast")
    fr = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", flight.analyzer_input(err.flight_dumps)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fr.returncode == 0, fr.stderr
    said = fr.stdout + fr.stderr  # the analyzer reports through logging
    assert "Collective sequence number: 3 has errors" in said and "COLLECTIVE_TYPE_MISMATCH" in said


def test_torch_2_11_gets_a_copy_of_gloos_dumps_named_as_nccl_and_nothing_else_changed(tmp_path):
    # torch 2.11's analyzer stops at the first "gloo:" record; 2.12 and later read gloo's dumps as they are.
    def dump(*names):
        entries = [
            dict(record_id=k, collective_seq_id=k + 1, profiling_name=n, input_sizes=[[4]]) for k, n in enumerate(names)
        ]
        return {"version": "2.10", "pg_config": {"0": {"name": "0"}}, "entries": entries}

    gloo, nccl = tmp_path / "gloo", tmp_path / "nccl"
    for folder, backend in ((gloo, "gloo"), (nccl, "nccl")):
        folder.mkdir()
        for rank, last in enumerate(["all_reduce", "broadcast"]):
            (folder / f"fr_trace_rank_{rank}").write_bytes(
                pickle.dumps(dump(f"{backend}:all_reduce", f"{backend}:{last}"))
            )
    assert flight.analyzer_input(str(gloo), "2.12.0") == str(gloo)
    assert flight.analyzer_input(str(nccl), "2.11.0+cu130") == str(nccl)
    copy = flight.analyzer_input(str(gloo), "2.11.0+cu130")
    assert copy != str(gloo) and sorted(os.listdir(copy)) == sorted(os.listdir(gloo))
    for rank, last in enumerate(["all_reduce", "broadcast"]):
        original = pickle.loads((gloo / f"fr_trace_rank_{rank}").read_bytes())
        renamed = pickle.loads((tmp_path / copy / f"fr_trace_rank_{rank}").read_bytes())
        assert original == dump("gloo:all_reduce", f"gloo:{last}")  # the dumps the learner opens stay gloo's
        assert renamed == dump("nccl:all_reduce", f"nccl:{last}")
    # Where the copy cannot be written (a file in its place), the folder itself: a timeout's report never fails here.
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "fr_trace_rank_0").write_bytes((gloo / "fr_trace_rank_0").read_bytes())
    (tmp_path / "blocked-nccl-names").write_text("in the way")
    assert flight.analyzer_input(str(blocked), "2.11.0+cu130") == str(blocked)


def test_the_kept_dumps_are_the_last_hangs_each_with_its_analyzer_copy(tmp_path, monkeypatch):
    # A hang's 2.11 copy neither counts as a hang nor outlives it; a folder another kernel removed meanwhile is skipped.
    monkeypatch.setenv("MGPU_FLIGHT_DIR", str(tmp_path))
    dump = tmp_path.parent / f"{tmp_path.name}-dump"
    dump.write_bytes(pickle.dumps({"entries": []}))
    hangs = []
    for k in range(flight.KEEP_LAST + 2):
        hangs.append(flight.keep_dumps({0: str(dump)}))
        os.mkdir(hangs[-1] + flight.COPY_SUFFIX)
        os.utime(hangs[-1], (k, k))  # the oldest first, whatever the clock's resolution
    kept = sorted(os.listdir(tmp_path))
    expected = [os.path.basename(h) + s for h in hangs[-flight.KEEP_LAST :] for s in ("", flight.COPY_SUFFIX)]
    assert kept == sorted(expected)


def test_flight_recorder_summary_reads_nccl_and_gloo_entries():
    nccl = {
        "entries": [
            dict(record_id=0, pg_id=0, collective_seq_id=1, profiling_name="nccl:all_reduce", state="completed"),
            dict(record_id=1, pg_id=0, collective_seq_id=2, profiling_name="nccl:all_gather", state="started"),
            dict(record_id=2, pg_id=0, collective_seq_id=3, profiling_name="nccl:all_reduce", state="scheduled"),
        ]
    }
    assert flight.summarise(nccl) == {"last_completed": (1, "all_reduce"), "stuck_in": (2, "all_gather")}
    gloo = {
        "entries": [
            dict(
                record_id=0,
                pg_id=0,
                collective_seq_id=1,
                profiling_name="gloo:broadcast",
                state="scheduled",
                retired=True,
            ),
            dict(record_id=1, pg_id=1, collective_seq_id=1, profiling_name="gloo:barrier", state="scheduled"),
            dict(record_id=2, pg_id=0, is_p2p=True, p2p_seq_id=4, profiling_name="gloo:recv", state="scheduled"),
        ]
    }
    assert flight.summarise(gloo) == {"last_completed": (1, "broadcast"), "stuck_in": (4, "p2p recv")}
    assert flight.summarise(None) is None and flight.summarise({"error": "no recorder"}) is None
    assert flight.describe(None) == "flight recorder: no dump"


def test_each_launch_has_a_fresh_private_folder_that_goes_with_it():
    # The rendezvous store and the stack dumps live in the job's folder: made fresh for each launch (mode 0700,
    # ours, empty when the ranks start), removed when it ends.
    def rank_fn(rank, world_size):
        folder = os.path.dirname(os.environ["MGPU_INIT_METHOD"][len("file://") :])
        st = os.stat(folder)
        return folder, stat.S_IMODE(st.st_mode), st.st_uid

    first = mh.run_ranks(rank_fn, 2, quiet=True, stream=False).values
    second = mh.run_ranks(rank_fn, 2, quiet=True, stream=False).values
    assert first[0] == first[1] and second[0] == second[1]
    assert first[0][0] != second[0][0]
    assert all(v[1:] == (0o700, os.getuid()) for v in first + second)
    assert not os.path.exists(first[0][0]) and not os.path.exists(second[0][0])


def test_bench_spawn_baseline_uses_a_fresh_private_folder_and_removes_it(tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    from mgpu_helpers.bench import launch as bench_launch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def fake_spawn(fn, args, nprocs, join):  # the store's folder, as the ranks would see it
        store = args[1]
        folder = os.path.dirname(store)
        seen.append((os.path.isdir(folder), os.path.exists(store), stat.S_IMODE(os.stat(folder).st_mode)))

    monkeypatch.setattr(mp, "spawn", fake_spawn)
    assert bench_launch.time_mp_spawn(2) >= 0
    assert seen == [(True, False, 0o700)]
    assert os.listdir(tmp_path) == []
