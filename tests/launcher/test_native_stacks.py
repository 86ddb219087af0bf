"""py-spy's native stacks of hung ranks, beside faulthandler's Python stacks (launcher/native_stacks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import mgpu_helpers as mh
from mgpu_helpers.launcher import native_stacks


@pytest.fixture
def py_spy_attaches():
    """Skips, saying why, unless py-spy reads a sleeping Python process of ours here."""
    program = native_stacks.py_spy()
    if program is None:
        pytest.skip("py-spy is not installed")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        got = subprocess.run([program, "dump", "--pid", str(sleeper.pid)], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    if got.returncode != 0:
        pytest.skip(f"py-spy cannot attach here (ptrace not allowed?): {got.stderr.strip()[:200]}")


def test_a_rank_hung_in_a_gloo_collective_shows_where_it_waits_in_c10d(py_spy_attaches):
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        if rank == 0:
            dist.all_reduce(t)  # rank 1 broadcasts instead: neither collective completes
        else:
            dist.broadcast(t, src=0)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(rank_fn, 2, timeout=3, quiet=True, stream=False)
    err = info.value
    assert set(err.native_stacks) == {0, 1}
    for rank, dump in err.native_stacks.items():
        # The Python frames are there too (py-spy reads both); beneath them, the C++ wait faulthandler cannot show.
        assert "rank_fn" in dump and "all_reduce" in err.stacks[0]
        beneath = native_stacks.beneath_python(dump)
        assert any(f.startswith("c10d::") for f in beneath), beneath
        assert "c10d::" not in err.stacks[rank]
    assert "native frames under that Python stack, rank 1" in str(err)
    assert "No native (C++) stacks" not in str(err)


def test_a_rank_whose_peer_never_joins_shows_gloo_waiting_in_the_rendezvous(py_spy_attaches):
    def rank_fn(rank, world_size):
        import os
        import time

        import torch.distributed as dist

        if rank == 1:
            time.sleep(60)  # never joins
        dist.init_process_group("gloo", init_method=os.environ["MGPU_INIT_METHOD"], rank=rank, world_size=world_size)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(rank_fn, 2, init=False, timeout=3, quiet=True, stream=False)
    err = info.value
    # faulthandler's stack ends at init_process_group; beneath it, gloo waits in the store for its peer.
    assert err.waiting_in[0].startswith("dist.init_process_group")
    beneath = native_stacks.beneath_python(err.native_stacks[0])
    assert "gloo::rendezvous::Context::connectFullMesh (libtorch_cpu.so)" in beneath, beneath
    assert any(f.startswith("c10d::FileStore::wait") for f in beneath), beneath
    assert "gloo::" not in err.stacks[0]


DUMP = """Process 11505: python -m mgpu_helpers.launcher.server 4 11439
Python v3.11.7 (/usr/bin/python3.11)

Thread 11506 (idle): "mgpu-flight-recorder"
    sigtimedwait (libc.so.6)
    sigwait (signal.py:82)
Thread 11505 (idle): "MainThread"
    0x7fb704ca3f16 (libc.so.6)
    pthread_cond_wait (libc.so.6)
    std::condition_variable::wait (libstdc++.so.6.0.30)
    c10d::Work::wait (libtorch_cpu.so)
    pybind11::cpp_function::initialize<F, bool, c10d::Work*>(F&&)::{lambda(pybind11::detail::function_call&)#1}::_FUN (libtorch_python.so)
    void c10d::foo<std::vector<at::Tensor, std::allocator<at::Tensor> > >(int) (libtorch_cpu.so)
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    fn (<dynamic-code>:9)
    0x7fb704c4524a (libc.so.6)
"""


def test_the_native_frames_beneath_python_are_the_main_threads_with_their_names_shortened():
    assert native_stacks.beneath_python(DUMP) == [
        "pthread_cond_wait (libc.so.6)",
        "std::condition_variable::wait (libstdc++.so.6.0.30)",
        "c10d::Work::wait (libtorch_cpu.so)",
        "void c10d::foo (libtorch_cpu.so)",
    ]
    assert native_stacks.beneath_python("") == []


def test_without_py_spy_the_reason_is_one_line_and_nothing_waits(monkeypatch, tmp_path):
    monkeypatch.setattr(native_stacks, "py_spy", lambda: None)
    assert native_stacks.take(str(tmp_path), [0, 1]) == ({}, "py-spy is not installed (pip install py-spy adds them)")


def test_a_py_spy_that_cannot_attach_or_hangs_is_reported_per_rank_within_the_timeout(monkeypatch, tmp_path):
    fake = tmp_path / "py-spy"
    # Fails for pid 1 as py-spy does without ptrace rights, hangs for any other pid.
    fake.write_text(
        '#!/bin/sh\nif [ "$4" = 1 ]; then echo "Error: Permission denied (os error 13)" >&2; exit 1; fi\nexec sleep 30\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(native_stacks, "py_spy", lambda: str(fake))
    (tmp_path / "pid-0").write_text("1")
    (tmp_path / "pid-1").write_text(str(os.getpid()))
    t0 = time.monotonic()
    dumps, why = native_stacks.take(str(tmp_path), [0, 1, 2], timeout_s=1.0)
    assert time.monotonic() - t0 < 5
    assert dumps == {}
    assert why.startswith("rank(s) [0, 1, 2], ")
    assert "py-spy could not read it: Error: Permission denied (os error 13)" in why
    assert "py-spy took over 1 s" in why and "its pid was never written" in why


@pytest.mark.parametrize(
    ("scope", "py_spy", "launcher", "opened"),
    [
        (1, "py-spy", 4242, True),
        (0, "py-spy", 4242, False),
        (None, "py-spy", 4242, False),
        (1, None, 4242, False),
        (1, "py-spy", None, False),
    ],
)
def test_a_rank_lets_only_its_launching_kernel_attach_where_yama_allows_only_ancestors(
    monkeypatch, tmp_path, scope, py_spy, launcher, opened
):
    calls = []
    monkeypatch.setattr(native_stacks, "_yama_scope", lambda: scope)
    monkeypatch.setattr(native_stacks, "py_spy", lambda: py_spy)
    monkeypatch.setattr(native_stacks, "_allow_ptracer", calls.append)
    native_stacks.note_pid(str(tmp_path), 3, launcher)
    assert (tmp_path / "pid-3").read_text() == str(os.getpid())
    assert calls == ([4242] if opened else [])  # the kernel's pid, never "any process"


def test_every_rank_is_told_which_kernel_launched_it():
    env = mh.run_ranks(lambda rank, world_size: os.environ.get("MGPU_LAUNCHER_PID"), 2, quiet=True).values
    assert env == [str(os.getpid())] * 2
