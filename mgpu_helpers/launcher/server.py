"""The rank server: a process with torch imported that never touches CUDA, so that forking ranks from it is safe
even when the notebook kernel has used a GPU. Started by the kernel (``python -m mgpu_helpers.launcher.server FD
PARENT_PID``) or forked for it by the fork server (:func:`serve_kernel`). Each job has a *leader* (forked from the
server, in a process group of its own) that forks the ranks and reports how each exits. Who cleans up::

    notebook kernel ──(Unix socket)── server (own session; exits when the socket closes, and dies with a
                                         │     kernel that started it: PR_SET_PDEATHSIG)
                                         └─ leader of job k (pgid = its pid; dies with the server)
                                              └─ rank 0..n-1 (die with the leader)

The leader lives until the notebook closes the job's status pipe (or the server goes), even after its ranks have
exited, so its pid (the job's process group) cannot be reused while the notebook may ``killpg`` it; then it ends its
group and every process orphaned under it (:func:`_end_everything_under_me`)."""

import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import sys
from contextlib import suppress

from mgpu_helpers.launcher import rank_process
from mgpu_helpers.launcher.messages import RankExit, Ready, Started
from mgpu_helpers.launcher.wire import recv_msg, send_msg, write_frame

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


def close_fds(fds) -> None:
    for fd in fds:
        with suppress(OSError):
            os.close(fd)


def _end_everything_under_me(rank_pids) -> None:
    """Kill what is left of the job: the ranks, then what was orphaned under this subreaper, then the group. The
    ranks go first and are reaped: a process a rank started (in a session of its own, even) becomes our child as
    that rank dies, and is then found below. An orphan is a direct child of ours, in whatever session or group it
    put itself; its pid cannot be reused before we reap it, so killing it by pid is safe."""
    for pid in rank_pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in rank_pids:
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)
    try:  # our children: Linux lists them per thread; psutil (a scan of /proc) elsewhere
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            orphans = [int(p) for p in f.read().split()]
    except OSError:
        import psutil

        orphans = [c.pid for c in psutil.Process().children()]
    for pid in orphans:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)  # ourselves included: everything has been reported


def run_leader(job, fds: list[int], server_pid: int) -> None:
    """Fork the ranks of one job, then report each exit status to the notebook."""
    die_with_parent(server_pid)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # The server ignores SIGCHLD (the kernel reaps for it); here exits must stay zombies until waitpid
    # reads them, and the ranks must inherit the default (subprocess.wait in a rank needs it).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for dump_signal in (signal.SIGUSR1, signal.SIGUSR2):  # stack and flight-recorder dumps are for the ranks
        signal.signal(dump_signal, signal.SIG_IGN)
    n = job.world_size
    out_fds, res_fds, status_fd = fds[:n], fds[n : 2 * n], fds[2 * n]
    leader_pid = os.getpid()
    pids = {}
    for rank in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent(leader_pid)
                for dump_signal in (signal.SIGUSR1, signal.SIGUSR2):
                    signal.signal(dump_signal, signal.SIG_DFL)
                close_fds([fd for i, fd in enumerate(out_fds + res_fds) if i % n != rank] + [status_fd])
                rank_process.main(job, rank, out_fds[rank], res_fds[rank])
            finally:
                os._exit(70)
        pids[pid] = rank
    close_fds(out_fds + res_fds)
    # SIGCHLD wakes the poll below through this pipe, so an exit is reported the moment it happens. (A rank
    # that exited before this handler was set is a zombie already, read by the first waitpid below.)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    poller = select.poll()
    poller.register(status_fd, 0)  # POLLERR / POLLHUP: the notebook closed its end
    poller.register(wake_r, select.POLLIN)
    with suppress(OSError):  # EPIPE: the notebook is gone
        while True:
            with suppress(ChildProcessError):  # reap every child that has exited (ranks and orphans alike)
                while (reaped := os.waitpid(-1, os.WNOHANG))[0]:
                    pid, status = reaped
                    if pid in pids:
                        write_frame(status_fd, pickle.dumps(RankExit(pids.pop(pid), os.waitstatus_to_exitcode(status))))
            events = dict(poller.poll())
            if events.get(status_fd, 0) & (select.POLLERR | select.POLLHUP):
                break
            if wake_r in events:
                os.read(wake_r, 4096)
    _end_everything_under_me(list(pids))
    os._exit(0)


# Slow imports that ranks may need and a server can do once for all its later ranks: torch.optim and DDP import
# torch._dynamo on first use, about a second per rank of every launch that trains, on a laptop. They start no threads,
# so forking after them is safe. The fork server imports them before it forks any server; a server the kernel started
# itself, once it has been idle IDLE_PRELOAD_S: a learner reading between cells leaves it that long, a notebook run cell
# after cell (nbval) rarely does, so its launches do not queue behind an import (1.5 s was too short: a cell drawing a
# figure took that long, and the next launch waited a second for an import none of its ranks used).
PRELOADABLE = ("torch._dynamo",)
IDLE_PRELOAD_S = float(os.environ.get("MGPU_IDLE_PRELOAD_S", "5"))


def import_preloadable() -> None:
    for name in PRELOADABLE:
        with suppress(Exception):  # an optional speed-up, never a reason not to serve
            importlib.import_module(name)


def serve(sock: socket.socket) -> None:
    server_pid = os.getpid()
    while True:
        if not all(m in sys.modules for m in PRELOADABLE) and not select.select([sock], [], [], IDLE_PRELOAD_S)[0]:
            import_preloadable()
            continue
        try:
            data, fds = recv_msg(sock, maxfds=253)
        except (EOFError, ConnectionError):
            return  # the notebook kernel closed its end (or is gone): we are done
        job = pickle.loads(data)
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
        with suppress(OSError):
            os.setpgid(pid, pid)  # also here, so the kernel can kill the group as soon as it has the pid
        close_fds(fds)
        try:
            send_msg(sock, pickle.dumps(Started(job.job_id, pid)))
        except OSError:
            os.killpg(pid, signal.SIGKILL)  # nobody is left to supervise this job (the leader waits: safe)
            return


def import_rank_modules() -> None:
    """The whole point of a rank server (and of the fork server): pay for these imports once, then fork ranks that
    have them: torch, and what every rank imports (the launcher's rank modules come with ``rank_process``). Children
    that exit are reaped by Linux (no zombies, no bookkeeping), and the kernel's interrupt is not for this process."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import numpy  # noqa: F401
    import psutil  # noqa: F401
    import torch
    import torch.distributed  # noqa: F401


def serve_kernel(sock: socket.socket, forked: bool = True) -> None:
    """Tell the kernel at the other end of ``sock`` that this server takes jobs, and serve it. A server the fork server
    forked sends a pidfd of itself with its Ready: the kernel cannot wait for a process that is not its child."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    fds = [os.pidfd_open(os.getpid())] if forked else []
    try:
        send_msg(sock, pickle.dumps(Ready(os.getpid())), fds)
    except OSError:
        return  # the kernel went away before it was served (while we were importing torch, say)
    finally:
        close_fds(fds)
    serve(sock)


def main() -> None:
    fd, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent_pid)
    import_rank_modules()
    serve_kernel(socket.socket(fileno=fd), forked=False)


if __name__ == "__main__":
    main()
