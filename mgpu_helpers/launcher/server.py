"""The rank server: a CUDA-clean process with torch imported, from which rank processes are forked.

Started by :mod:`mgpu_helpers.launcher.launch` as ``python -m mgpu_helpers.launcher.server FD PARENT_PID``. It never touches
CUDA, so forking from it is safe even when the notebook kernel has used a GPU. Each job is handled by a
*leader* (forked from the server, in a process group of its own) that forks the ranks and reports how
each one exits. Process tree and who cleans up::

    notebook kernel ──(Unix socket)── server (own session; dies with the kernel: PR_SET_PDEATHSIG)
                                         └─ leader of job k (pgid = its pid; dies with the server)
                                              └─ rank 0..n-1 (die with the leader)

The server is also a child subreaper, so ranks orphaned by a killed leader are reaped, never left as zombies.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent(parent_pid: int) -> None:
    """Get SIGKILL when the parent goes; exit now if it already went (the race before prctl)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def _close_fds(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def run_leader(job: dict, fds: list[int], server_pid: int) -> None:
    """Fork the ranks of one job, tell the notebook their pids, then report each exit status."""
    from mgpu_helpers.launcher import rank as rank_process

    die_with_parent(server_pid)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)      # the server ignores it; we need waitpid
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)      # stack dumps are for the ranks, not for us
    n = job["world_size"]
    out_fds, res_fds, status_fd = fds[:n], fds[n:2 * n], fds[2 * n]
    leader_pid = os.getpid()
    pids = {}
    for rank in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent(leader_pid)
                signal.signal(signal.SIGUSR1, signal.SIG_DFL)
                _close_fds([fd for i, fd in enumerate(out_fds) if i != rank])
                _close_fds([fd for i, fd in enumerate(res_fds) if i != rank] + [status_fd])
                rank_process.main(job, rank, out_fds[rank], res_fds[rank])
            finally:
                os._exit(70)
        pids[pid] = rank
    _close_fds(out_fds + res_fds)
    from mgpu_helpers.launcher.wire import write_frame
    write_frame(status_fd, pickle.dumps(("pids", {r: p for p, r in pids.items()})))
    while pids:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        rank = pids.pop(pid, None)
        if rank is not None:
            write_frame(status_fd, pickle.dumps(("exit", rank, os.waitstatus_to_exitcode(status))))
    os._exit(0)


# Imported while the server is idle, after it has said it is ready: torch.optim and DDP import
# torch._dynamo on first use, which would otherwise cost seconds in every rank of every launch. Doing it
# before "ready" would make the first launch wait for it (several seconds on some machines). It starts no
# threads, so forking after it is safe.
IDLE_PRELOADS = ["torch._dynamo"]


def _preload_when_idle(sock: socket.socket, pending: list[str]) -> bool:
    """Import the next pending module unless a request arrives within a moment; True if one is waiting."""
    ready, _, _ = select.select([sock], [], [], 0.2)
    if ready:
        return True
    try:
        importlib.import_module(pending.pop(0))
    except Exception:   # noqa: BLE001 - an optional speed-up, never a reason not to serve
        pass
    return False


def serve(sock: socket.socket, parent_pid: int) -> None:
    from mgpu_helpers.launcher.wire import recv_msg, send_msg

    server_pid = os.getpid()
    pending = list(IDLE_PRELOADS)
    while True:
        if pending and not _preload_when_idle(sock, pending):
            continue
        try:
            data, fds = recv_msg(sock, maxfds=253)
        except (EOFError, ConnectionError):
            return  # the notebook kernel closed its end: we are done
        job = pickle.loads(data)
        if job.get("op") == "ping":
            send_msg(sock, pickle.dumps(("pong", server_pid)))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.setpgid(0, 0)
                run_leader(job, fds, server_pid)
            finally:
                os._exit(71)
        try:
            os.setpgid(pid, pid)   # also here, so the kernel can kill the group as soon as it has the pid
        except OSError:
            pass
        _close_fds(fds)
        try:
            send_msg(sock, pickle.dumps(("started", pid)))
        except OSError:
            os.killpg(pid, signal.SIGKILL)   # nobody is left to supervise this job
            return


def main() -> None:
    fd, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent_pid)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Children of ours that exit are reaped by the kernel: no zombies, no bookkeeping.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    t0 = time.perf_counter()
    # The whole point of this process: pay for these imports once, then fork ranks that have them.
    import cloudpickle  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    from mgpu_helpers.launcher import rank as rank_process  # noqa: F401
    sock = socket.socket(fileno=fd)
    from mgpu_helpers.launcher.wire import send_msg
    try:
        send_msg(sock, pickle.dumps(("ready", os.getpid(), time.perf_counter() - t0)))
    except OSError:
        return   # the notebook went away while we were importing torch: nothing to serve
    serve(sock, parent_pid)


if __name__ == "__main__":
    main()
