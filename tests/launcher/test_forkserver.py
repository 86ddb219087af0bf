"""The fork server: a kernel's rank server forked from a process that has imported torch once for every kernel,
and the kernel's own server wherever that cannot be (mgpu_helpers/launcher/forkserver.py)."""

import os
import signal
import socket
import sys
import threading
import time
from contextlib import suppress

import psutil
import pytest
from launcher_procs import gone, printed_pids, start_kernel, wait_gone

import mgpu_helpers as mh
from mgpu_helpers.launcher import forkserver, launch

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")),
    reason="the fork server needs Linux (pidfds); elsewhere each kernel starts its own server",
)


@pytest.fixture
def fork_served(monkeypatch, request):
    """The fork server on, with a key of this test's own (an idle time no other process uses), and every fork
    server of that key ended afterwards (never the one the rest of the suite shares)."""
    idle = f"{60 + len(request.node.name)}.{os.getpid()}"
    monkeypatch.setenv("MGPU_FORKSERVER", "1")
    monkeypatch.setenv("MGPU_FORKSERVER_IDLE_S", idle)
    launch.shutdown_server()
    yield
    launch.shutdown_server()
    for pid in _fork_servers(idle):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _fork_servers(idle: str) -> list[int]:
    """The fork servers started with ``MGPU_FORKSERVER_IDLE_S=idle``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with suppress(psutil.Error):
            if (
                "mgpu_helpers.launcher.forkserver" in " ".join(p.info["cmdline"] or [])
                and p.environ().get("MGPU_FORKSERVER_IDLE_S") == idle
            ):
                found.append(p.pid)
    return found


def _rank_state(rank, world_size):
    import sys

    import torch
    import torch.distributed as dist

    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    return int(t.item()), "torch._dynamo" in sys.modules


def test_a_kernels_servers_are_forked_from_one_fork_server_that_has_imported_torch_and_dynamo(fork_served):
    # The ranks of the very first launch have torch._dynamo: nothing is imported per launch, or per rank.
    assert mh.run_ranks(_rank_state, 2, quiet=True).values == [(3, True), (3, True)]
    first = launch.server_state()
    assert first.forked and first.pid is not None
    parent = psutil.Process(first.pid).ppid()
    assert "mgpu_helpers.launcher.forkserver" in " ".join(psutil.Process(parent).cmdline())
    assert parent != os.getpid()  # not this kernel's child
    launch.shutdown_server()  # ended through its pidfd
    assert wait_gone([first.pid], 5)
    assert mh.run_ranks(_rank_state, 2, quiet=True).values == [(3, True), (3, True)]
    assert psutil.Process(launch.server_state().pid).ppid() == parent  # the same fork server


def test_a_forked_server_killed_during_a_launch_is_a_launch_error_and_the_next_launch_gets_a_new_one(fork_served):
    assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
    server = launch.server_state().pid

    def sleeps(rank, world_size):
        import time

        time.sleep(60)

    killer = threading.Timer(1.0, os.kill, (server, signal.SIGKILL))  # out of memory, say, or killed by hand
    killer.start()
    try:
        # long before the timeout: the ranks go with their server, and the message says so
        with pytest.raises(mh.LaunchError, match="the rank server (died during this launch|went away)"):
            mh.run_ranks(sleeps, 2, timeout=30, quiet=True)
    finally:
        killer.cancel()
    assert wait_gone([server], 5)
    assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3  # a new server, forked again
    assert launch.server_state().forked and launch.server_state().pid != server


def test_the_forked_server_and_its_ranks_go_when_the_kernel_dies_and_the_fork_server_stays(fork_served, tmp_path):
    kernel = start_kernel(
        tmp_path,
        """
        import os, time
        import psutil
        import mgpu_helpers as mh
        def rank_fn(rank, world_size):
            print("pids", os.getpid(), psutil.Process(os.getppid()).ppid(), flush=True)   # rank, its server
            time.sleep(120)
        if __name__ == "__main__":
            mh.run_ranks(rank_fn, 2, timeout=100)
        """,
    )
    ranks, servers = map(set, zip(*printed_pids(kernel, 2, "pids ")))
    (server,) = servers
    fork_server = psutil.Process(server).ppid()
    assert "mgpu_helpers.launcher.forkserver" in " ".join(psutil.Process(fork_server).cmdline())
    pids = ranks | servers
    kernel.kill()  # like a kernel that dies or is restarted
    kernel.wait()
    assert wait_gone(pids, 10)
    assert not gone(fork_server)  # it serves the next kernel


class _Impostor:
    """Something else at the fork server's name: it accepts each connection and closes it (as a fork server
    that reaches its idle exit just as a kernel connects does), optionally as another user."""

    def __init__(self, name: bytes, uid: int | None = None) -> None:
        self.accepted = 0
        if uid is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(name)
            self.sock.listen(8)
            threading.Thread(target=self._serve, daemon=True).start()
            self.pid = None
            return
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # another user binds the name, and holds it
            try:
                os.setuid(uid)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(name)
                s.listen(8)
                os.write(ready_w, b"x")
                time.sleep(60)
            finally:
                os._exit(0)
        os.read(ready_r, 1)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        if self.pid is None:
            self.sock.close()
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def test_a_fork_server_that_closes_before_forking_leaves_the_kernel_to_start_its_own(fork_served, monkeypatch):
    name = b"\0mgpu-course-test-impostor-%d" % os.getpid()
    monkeypatch.setattr(forkserver, "address", lambda env: name)
    impostor = _Impostor(name)
    try:
        assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
        assert impostor.accepted == 1  # asked once, then a server of the kernel's own
        assert not launch.server_state().forked
        assert psutil.Process(launch.server_state().pid).ppid() == os.getpid()
        launch.shutdown_server()
        assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
        assert impostor.accepted == 2  # each new server tries the fork server first
    finally:
        impostor.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="holding the name as another user needs root (setuid)")
def test_a_name_held_by_another_user_is_never_sent_a_job(fork_served, monkeypatch):
    name = b"\0mgpu-course-test-other-user-%d" % os.getpid()
    monkeypatch.setattr(forkserver, "address", lambda env: name)
    impostor = _Impostor(name, uid=65534)
    try:
        assert forkserver.connect(dict(os.environ)) is None
        assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
        assert not launch.server_state().forked
    finally:
        impostor.close()


def test_an_idle_fork_server_exits_and_the_next_kernel_starts_another(fork_served, monkeypatch):
    monkeypatch.setenv("MGPU_FORKSERVER_IDLE_S", "0.5")
    assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
    first = psutil.Process(launch.server_state().pid).ppid()
    assert wait_gone([first], 30)  # half a second without a kernel
    assert launch.server_state().alive  # this kernel's server is not the fork server's to end
    launch.shutdown_server()
    assert mh.run_ranks(_rank_state, 2, quiet=True).values[0][0] == 3
    assert launch.server_state().forked and psutil.Process(launch.server_state().pid).ppid() != first


def test_the_name_changes_with_the_launchers_files_and_the_import_time_environment(tmp_path, monkeypatch):
    (tmp_path / "launcher").mkdir()
    for rel in ("__init__.py", "launcher/server.py"):
        (tmp_path / rel).write_text("# a module\n")
    monkeypatch.setattr(forkserver, "PKG", str(tmp_path))
    env = {"HOME": "/home/a", "OMP_NUM_THREADS": "2"}
    name = forkserver.address(env)
    assert name.startswith(b"\0mgpu-course-forkserver-%d-" % os.getuid())
    # the rest of a kernel's environment reaches the ranks with each job: no fork server of its own
    assert forkserver.address({**env, "HOME": "/home/b", "PWD": "/x", "MGPU_PROJECTION": "1"}) == name
    assert forkserver.address({**env, "OMP_NUM_THREADS": "4"}) != name  # read by import torch
    (tmp_path / "launcher" / "server.py").write_text("# an edited module\n")
    assert forkserver.address(env) != name
