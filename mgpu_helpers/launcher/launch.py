"""Run a function on N ranks from a notebook cell, and bring back values, output, spans and failures.

``run_ranks(fn, world_size)`` sends ``fn`` by value (cloudpickle, so cell-defined functions, closures and
lambdas work) to a long-lived *rank server* (:mod:`mgpu_helpers.launcher.server`): a process started with a clean
environment, which has imported torch once and never touches CUDA. Ranks are forked from it, so a repeat
launch costs a fork, not an ``import torch`` per rank, and a notebook that has used CUDA can still launch.

The notebook side supervises: it streams each rank's output as ``[rank k]`` lines into the cell, stops
every rank as soon as one fails, and at the timeout takes each rank's Python stack before ending them.
Rendezvous is a FileStore in a private temp folder and sockets are bound to the loopback interface, so a
launch opens no port on the network and never clashes with another launch.
"""
from __future__ import annotations

import atexit
import inspect
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from mgpu_helpers import hardware
from mgpu_helpers.launcher.results import RankResults
from mgpu_helpers.launcher.supervise import _Job, supervise
from mgpu_helpers.launcher.errors import LaunchError
from mgpu_helpers.launcher.wire import recv_msg, send_msg

__all__ = ["RankResults", "prewarm", "run_ranks", "shutdown_server"]
MAX_WORLD_SIZE = 64


# --------------------------------------------------------------------------------------------------------
# The rank server: one per notebook kernel, started on first use (or by setup(), in the background).


class _Server:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.ready = False
        self.import_seconds = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the server process (returns at once; it imports torch in the background)."""
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The server must stay CUDA-free and quiet; PYTHONPATH lets it import this very package.
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mgpu_helpers.launcher.server", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
            # Its own session: Ctrl-C / Jupyter's interrupt to the kernel's process group must not hit it.
            start_new_session=True, close_fds=True,
        )
        theirs.close()
        self.sock = ours
        self.ready = False

    def wait_ready(self, timeout: float = 120.0) -> None:
        if self.ready:
            return
        self.sock.settimeout(timeout)
        try:
            data, _ = recv_msg(self.sock)
        except (EOFError, OSError, socket.timeout) as exc:
            code = self.proc.poll()
            self.stop()
            raise LaunchError(
                f"the rank server did not start ({type(exc).__name__}, exit code {code}). Check that "
                f"`{sys.executable} -c 'import torch'` works in this environment.") from None
        finally:
            if self.sock is not None:
                self.sock.settimeout(None)
        _tag, _pid, self.import_seconds = pickle.loads(data)
        self.ready = True

    def submit(self, job: dict, fds: list[int]) -> int:
        """Hand a job to the server; returns the pid of its leader (= the process group of its ranks)."""
        with self.lock:
            if not self.alive():
                self.start()
            self.wait_ready()
            try:
                send_msg(self.sock, pickle.dumps(job), fds)
                data, _ = recv_msg(self.sock)
            except (OSError, EOFError):
                self.stop()
                raise LaunchError("the rank server went away; run the cell again (a new one starts).") from None
        tag, pid = pickle.loads(data)
        assert tag == "started", tag
        return pid

    def stop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()   # the server reads EOF and exits
            except OSError:
                pass
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self.ready = False


_server = _Server()
atexit.register(_server.stop)


def prewarm() -> None:
    """Start the rank server now, so that the first ``run_ranks`` does not wait for ``import torch``."""
    with _server.lock:
        if not _server.alive():
            _server.start()


def shutdown_server() -> None:
    """Stop the rank server (the next launch starts a new one). No rank processes are left behind."""
    with _server.lock:
        _server.stop()


# --------------------------------------------------------------------------------------------------------
# Checking the request before anything starts.


def _check_request(fn, world_size, args, timeout) -> bytes:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise LaunchError(f"world_size must be a whole number of ranks, like 4; got {world_size!r}.")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise LaunchError(f"world_size must be between 1 and {MAX_WORLD_SIZE}; got {world_size}.")
    if not callable(fn):
        raise LaunchError(f"fn must be a function fn(rank, world_size, *args); got {type(fn).__name__}.")
    if not isinstance(args, (tuple, list)):
        raise LaunchError(f"args must be a tuple of extra arguments, like args=(x,); got {type(args).__name__}.")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise LaunchError(f"timeout must be a positive number of seconds; got {timeout!r}.")
    try:
        inspect.signature(fn).bind(0, world_size, *args)
    except TypeError as exc:
        raise LaunchError(
            f"{getattr(fn, '__name__', 'fn')} cannot be called as fn(rank, world_size, *args) with "
            f"{len(args)} extra argument(s): {exc}. Give it the parameters (rank, world_size, ...).") from None
    except ValueError:
        pass   # builtins without a signature: let them try
    import cloudpickle
    try:
        return cloudpickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise LaunchError(
            f"fn or its args cannot be sent to the rank processes ({type(exc).__name__}: {exc}). "
            "Functions, closures and lambdas defined in cells travel fine; open files, locks, sockets, "
            "generators, threads or GPU handles do not: create those inside fn instead.") from None


def _loopback_env() -> dict:
    """Environment that keeps every socket of a launch on the loopback interface."""
    env = {"MASTER_ADDR": "127.0.0.1"}
    if sys.platform.startswith("linux"):
        env.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    return env


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_envs(world_size: int, backend: str, store_path: str, debug: bool, extra: dict | None) -> tuple[dict, list]:
    """(environment shared by all ranks, per-rank additions). torchrun's variable names, loopback only."""
    env = dict(os.environ)
    env.update(_loopback_env())
    env.update(MASTER_PORT=str(_free_loopback_port()), WORLD_SIZE=str(world_size),
               LOCAL_WORLD_SIZE=str(world_size), MGPU_BACKEND=backend,
               MGPU_INIT_METHOD=f"file://{store_path}")
    # NVLink multicast (NVLS) can take a host's GPUs out of service on the course machines: off unless asked.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    if debug:
        env.update(TORCH_DISTRIBUTED_DEBUG="DETAIL", TORCH_FR_BUFFER_SIZE="2000",
                   NCCL_DEBUG=env.get("NCCL_DEBUG", "WARN"))
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    per_rank = [{"RANK": str(r), "LOCAL_RANK": str(r), "GROUP_RANK": "0"} for r in range(world_size)]
    return env, per_rank


def run_ranks(fn, world_size: int, args=(), backend: str = "auto", timeout: float = 60.0, *,
              init: bool = True, env: dict | None = None, debug: bool = False, stream: bool = True,
              quiet: bool = False) -> RankResults:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` rank processes and return their results.

    - ``fn`` may be defined in a cell, be a closure or a lambda; it and ``args`` travel by cloudpickle.
    - ``backend``: "auto" (NCCL with one GPU per rank when there are enough GPUs, else gloo on the CPU),
      "nccl" or "gloo". With ``init=True`` the default process group is up when fn starts; with
      ``init=False`` fn joins it itself (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and MGPU_INIT_METHOD
      are set, loopback only).
    - ``timeout``: seconds for the whole launch; past it each rank's Python stack is taken, all ranks are
      ended, and :class:`RankTimeout` is raised.
    - ``env``: extra environment variables for the ranks only (the notebook's own is never changed).
    - ``debug``: torch's own diagnosis (TORCH_DISTRIBUTED_DEBUG=DETAIL: mismatched collectives are named).
    - ``stream``: print each rank's output live as ``[rank k] ...`` lines; ``quiet``: no summary line.

    Returns :class:`RankResults` (``.values`` in rank order). Raises :class:`LaunchError` for bad input
    (before any rank starts), :class:`RankError` when a rank raises or dies (the others are ended at once),
    :class:`RankTimeout` at the timeout. A KeyboardInterrupt ends every rank before it propagates.
    """
    payload = _check_request(fn, world_size, args, timeout)
    try:
        backend, reason = hardware.choose_backend(world_size, backend)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    t0 = time.monotonic()
    job_dir = tempfile.mkdtemp(prefix="mgpu-job-")
    store_path = os.path.join(job_dir, "store")
    shared_env, per_rank = _rank_envs(world_size, backend, store_path, debug, env)
    job = _Job(world_size, stream)
    pipes = []
    try:
        out = [os.pipe() for _ in range(world_size)]
        res = [os.pipe() for _ in range(world_size)]
        status = os.pipe()
        pipes = [fd for pair in out + res + [status] for fd in pair]
        request = dict(op="run", world_size=world_size, backend=backend, init=init,
                       init_method=f"file://{store_path}", payload=payload, env=shared_env,
                       rank_env=per_rank, job_dir=job_dir, sys_path=list(sys.path), cwd=os.getcwd(),
                       # torch's own timeout stays above ours, so that ours fires first and takes stacks
                       pg_timeout=float(timeout) + 60.0)
        write_ends = [w for _, w in out] + [w for _, w in res] + [status[1]]
        job.pgid = _server.submit(request, write_ends)
        for fd in write_ends:
            os.close(fd)
        for r, (rd, _) in enumerate(out):
            job.watch(rd, "out", r)
        for r, (rd, _) in enumerate(res):
            job.watch(rd, "res", r)
        job.watch(status[0], "status", None)
        pipes = []   # from here on job owns the read ends
        return supervise(job, world_size, backend, reason, timeout, t0, job_dir, quiet)
    except BaseException:
        job.kill()   # KeyboardInterrupt included: no rank outlives the cell
        raise
    finally:
        for fd in pipes:
            try:
                os.close(fd)
            except OSError:
                pass
        job.drain(2.0)
        job.kill()
        job.close()
        shutil.rmtree(job_dir, ignore_errors=True)
