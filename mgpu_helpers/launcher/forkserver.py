"""The fork server: one process per user and library version that has imported what a rank server imports (``import
torch``, 1.5 to 4 s of CPU, and ``torch._dynamo``), and forks a rank server for each notebook kernel that connects,
ready in milliseconds, which serves that one kernel and exits when its socket closes (:class:`ForkedServer`).

It is found by an abstract Unix socket name (nothing on disk, gone with the process); each end checks that the other
runs as the same user. The kernel that finds none binds the name itself and hands the listening socket to the fork
server it starts, so a connection made at once waits in the backlog while torch is imported, and two kernels starting at
once find one fork server. Linux only (pidfds); elsewhere, with ``MGPU_FORKSERVER=0`` or where the fork server fails
before its server's Ready, each kernel starts its own server."""

import glob
import hashlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
from contextlib import suppress

IDLE_EXIT_S = float(os.environ.get("MGPU_FORKSERVER_IDLE_S", "600"))
# What ``import torch`` (and what the server imports with it) may read, and this module's and the server's own
# knobs; the rest of a kernel's environment (the classroom's MGPU_PROJECTION, say) reaches its ranks with each
# job (rank_process sets it), so it needs no fork server of its own.
IMPORT_TIME_VARS = (
    *("PYTHON", "LD_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "CUDA", "NCCL", "GLOO"),
    *("MGPU_FORKSERVER_IDLE_S", "MGPU_IDLE_PRELOAD_S"),
)
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def address(env: dict) -> bytes:
    """The fork server's abstract socket name for this user, interpreter, launcher version and environment."""
    parts = [sys.executable, PKG] + sorted(f"{k}={v}" for k, v in env.items() if k.startswith(IMPORT_TIME_VARS))
    # The modules a fork server has imported: an edited one means a new fork server, never a stale import.
    for path in sorted(glob.glob(os.path.join(PKG, "*.py")) + glob.glob(os.path.join(PKG, "launcher", "*.py"))):
        st = os.stat(path)
        parts.append(f"{path}:{st.st_mtime_ns}:{st.st_size}")
    key = hashlib.sha256(b"".join(part.encode("utf-8", "surrogateescape") + b"\0" for part in parts))
    return f"\0mgpu-course-forkserver-{os.getuid()}-{key.hexdigest()[:32]}".encode()


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket (from Linux, not from the peer)."""
    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]  # (pid, uid, gid)


def connect(env: dict) -> socket.socket | None:
    """A connection for which the fork server forks this kernel a rank server (starting the fork server if there
    is none); None where there can be none here (the kernel then starts its own server): not Linux with pidfds,
    ``MGPU_FORKSERVER=0``, or the name held by another user."""
    if not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")) or os.environ.get("MGPU_FORKSERVER") == "0":
        return None
    name = address(env)
    for _ in range(3):  # refused: nobody listens, so start one; a start that lost the race: connect to the winner
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(name)
            if peer_uid(sock) == os.getuid():  # else another user holds the name: never send them a job
                return sock
        except ConnectionRefusedError:
            sock.close()
            _start(name, env)
            continue
        except OSError:
            pass
        sock.close()
        return None


def spawn(module: str, sock: socket.socket, env: dict, *args: str, **popen) -> subprocess.Popen:
    """``python -m module FD *args``, handed ``sock`` as FD, in a session of its own: Ctrl-C / Jupyter's interrupt
    to the kernel's process group, and a kill of that group, miss it. (A rank server, or the fork server.)"""
    fd = sock.fileno()
    command = [sys.executable, "-m", module, str(fd), *args]
    return subprocess.Popen(command, pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env, start_new_session=True, **popen)


def _start(name: bytes, env: dict) -> None:
    # OSError: EADDRINUSE, another kernel bound the name first
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener, suppress(OSError):
        listener.bind(name)
        listener.listen(64)
        # Not waited for: subprocess reaps it on a later start if it ends while this kernel runs.
        spawn("mgpu_helpers.launcher.forkserver", listener, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class ForkedServer:
    """The part of ``subprocess.Popen`` the launcher uses, for a server the fork server forked. Not our child: its
    exit status cannot be read, only that it exited (``"unknown"``). Until its Ready brings the pidfd nothing is
    known (poll() is None), and ending it is closing its socket: a server forked for a closed socket exits at once."""

    def __init__(self) -> None:
        self.pid = self.returncode = self._fd = None

    def adopt(self, pid: int, pidfd: int) -> None:
        self.pid, self._fd = pid, pidfd

    def poll(self):
        if self._fd is not None and select.select([self._fd], [], [], 0)[0]:
            self._gone()
        return self.returncode

    def kill(self) -> None:
        if self._fd is not None:
            signal.pidfd_send_signal(self._fd, signal.SIGKILL)

    def wait(self, timeout: float | None = None):
        if self._fd is not None and not select.select([self._fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"rank server {self.pid}", timeout)
        self._gone()
        return self.returncode

    def _gone(self) -> None:
        fd, self._fd, self.returncode = self._fd, None, "unknown"
        if fd is not None:
            os.close(fd)


def main() -> None:
    from mgpu_helpers.launcher import server

    listener = socket.socket(fileno=int(sys.argv[1]))
    # Everything before the first fork, the optional imports too: every server forked from here has what a
    # training rank imports, so no launch and no checker's time limit ever pays for it. Only the first kernel
    # waits the extra second, once per fork server.
    server.import_rank_modules()
    server.import_preloadable()
    while select.select([listener], [], [], IDLE_EXIT_S)[0]:
        conn, _ = listener.accept()
        if peer_uid(conn) == os.getuid() and os.fork() == 0:
            try:
                listener.close()
                server.serve_kernel(conn)
            finally:
                os._exit(0)
        conn.close()
    # Idle for IDLE_EXIT_S: the name goes with the socket, and a later kernel starts a new fork server.


if __name__ == "__main__":
    main()
