"""``run_ranks`` and the notebook's end of the rank server (:mod:`~mgpu_helpers.launcher.server`): check the request,
hand the job over (rendezvous in a private folder, sockets on the loopback interface only), wait."""

import atexit
import functools
import inspect
import itertools
import os
import pickle
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass

import cloudpickle

from mgpu_helpers import hardware
from mgpu_helpers.launcher import flight, forkserver
from mgpu_helpers.launcher.errors import LaunchError
from mgpu_helpers.launcher.interrupts import interrupts_held
from mgpu_helpers.launcher.job import Job
from mgpu_helpers.launcher.messages import JobRequest, Ready, Started
from mgpu_helpers.launcher.results import RankResults
from mgpu_helpers.launcher.server import close_fds
from mgpu_helpers.launcher.supervise import supervise
from mgpu_helpers.launcher.wire import recv_msg, send_msg

MAX_WORLD_SIZE = 64
START_TIMEOUT_S = 120.0  # a cold start imports torch: seconds, more on a busy machine
REPLY_TIMEOUT_S = 60.0  # the server answers a job at once (one fork); past this it is stuck


@functools.cache
def _starter(pid: int) -> ThreadPoolExecutor:
    """The only thread that starts rank servers, one per process (``pid``: a forked copy has not got its parent's
    thread), living as long as the process (an idle worker of a pool waits for the next call, never exits). The server
    asks Linux for SIGKILL when its parent goes (PR_SET_PDEATHSIG), and Linux sends it when the *thread* that forked
    it exits, not the process. Forked from a short-lived worker thread, it would die with it, in later jobs."""
    return ThreadPoolExecutor(1, "mgpu-rank-server-starter")


_job_ids = itertools.count(1)


@dataclass(slots=True, eq=False)
class _Conn:
    """A rank server process and the notebook's end of its socket (``ready``: its Ready was read). The socket is
    closed only by :meth:`end`, after :class:`_Server` detached it: a connection it holds has an open socket."""

    proc: subprocess.Popen | forkserver.ForkedServer
    sock: socket.socket
    ready: bool = False

    @property
    def forked(self) -> bool:
        return isinstance(self.proc, forkserver.ForkedServer)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def end(self) -> bool:
        """Close the socket and kill the process; True once it is reaped. Every step may be repeated."""
        self.sock.close()
        if self.proc.poll() is None:
            # Killed, not asked to leave: a server still importing torch would only notice a closed socket
            # seconds later. Its jobs' leaders get SIGKILL from Linux as it dies (PR_SET_PDEATHSIG), their
            # ranks in turn, so nothing of its jobs outlives it.
            with suppress(OSError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return True


class _Server:
    """The notebook's end of the rank server. Every change of state is one assignment of ``conn`` (or of its ``ready``),
    made with interrupts held, so whatever exception lands at whatever moment the state is one of: no server; a server
    starting; a ready server. A detached connection waits in ``retired`` until its process has been ended and reaped, so
    an exception in the middle of ending it leaves it there to finish, never a half-closed one in use. ``lock`` makes
    one request and its reply one step; it is held only for steps that do not wait long."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn: _Conn | None = None
        self.retired: list[_Conn] = []
        self.own_server_next = False  # the fork server failed a start: the next server is our own

    def start(self) -> None:
        """Start a server if there is no live one (at once: it imports torch meanwhile)."""
        if (conn := self.conn) is None or not conn.alive():
            self.stop()
            _starter(os.getpid()).submit(self._spawn).result()

    def _spawn(self) -> None:
        # Runs on the starter thread, for the caller holding the lock; PYTHONPATH lets the server import this package.
        paths = [os.path.dirname(forkserver.PKG)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        own_server, self.own_server_next = self.own_server_next, False
        if not own_server and (sock := forkserver.connect(env)) is not None:
            self.conn = _Conn(forkserver.ForkedServer(), sock)
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = forkserver.spawn("mgpu_helpers.launcher.server", theirs, env, str(os.getpid()))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.conn = _Conn(proc, ours)

    def stop(self) -> None:
        """Detach the server, then end it (and any detached earlier that did not finish ending)."""
        conn = self.conn
        if conn is not None:
            self.retired.append(conn)
            self.conn = None
        for old in list(self.retired):
            if old.end():
                self.retired.remove(old)

    def _read_ready(self, conn: _Conn) -> None:
        """Read the server's Ready (it is in the socket, or the server died): called under the lock."""
        try:
            conn.sock.settimeout(REPLY_TIMEOUT_S)
            data, fds = recv_msg(conn.sock, maxfds=1)
            ready = pickle.loads(data)
            # A forked server sends one descriptor with its Ready (a pidfd of itself), a server of our own none.
            if not isinstance(ready, Ready) or len(fds) != (1 if conn.forked else 0):
                close_fds(fds)
                raise EOFError("expected Ready")
            if fds:
                conn.proc.adopt(ready.server_pid, fds[0])
            conn.ready = True
        except BaseException as exc:
            code = conn.proc.poll()
            self.stop()  # a frame half read, or none: this socket can no longer be trusted
            if conn.forked and isinstance(exc, (EOFError, OSError)):
                # The fork server ended before forking (its idle exit, say) or cannot import torch: this kernel
                # starts a server of its own, which names the cause if there is one.
                self.own_server_next = True
                return
            if isinstance(exc, (EOFError, OSError, pickle.UnpicklingError)):
                raise LaunchError(
                    f"the rank server did not start ({type(exc).__name__}, exit code {code}). Check that "
                    f"`{sys.executable} -c 'import torch'` works in this environment."
                ) from None
            raise

    def acquire_ready(self, gate) -> _Conn:
        """Take ``lock`` with a ready server (started if need be) and return it; the caller releases the lock.
        Call with interrupts held. A cold start's ``import torch`` is waited for without the lock, interrupts let
        through (``gate``): an interrupt ends the wait and leaves the server starting, for the next launch."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self.lock.acquire()  # interrupts are held: it cannot be taken and then left taken
            try:
                self.start()
                conn = self.conn
                if not conn.ready and select.select([conn.sock], [], [], 0)[0]:
                    self._read_ready(conn)
                if conn.ready:
                    return conn
                if time.monotonic() > deadline:
                    self.stop()
                    raise LaunchError(
                        f"the rank server did not start within {START_TIMEOUT_S:g} s (is `import torch` this "
                        "slow here?). Run the cell again to wait once more."
                    )
            except BaseException:
                self.lock.release()
                raise
            self.lock.release()
            if not conn.forked and "torch" not in sys.modules:  # a forked server is ready in milliseconds
                # Import torch here while the server imports its own (interrupts held: an import cut short cannot
                # be repeated): results hold tensors more often than not, and unpickling the first would import
                # torch after the server's import rather than beside it, on a core of its own.
                with suppress(ImportError):
                    import torch  # noqa: F401
            # The only wait: for Ready (or the server's death), at most a second a look. OSError or ValueError:
            # another thread closed the socket meanwhile; look again under the lock.
            with gate.allowed(), suppress(OSError, ValueError):
                select.select([conn.sock], [], [], min(1.0, max(0.0, deadline - time.monotonic())))

    def submit(self, request: JobRequest, fds: list[int], gate) -> tuple[Started, subprocess.Popen]:
        """Hand a job to a ready server; returns its Started reply and the server's Popen. Call with interrupts held.
        Whatever goes wrong between sending the job and reading its reply, the server is dropped: one whose reply
        was left unread would answer the next job with this one's leader. Its jobs die with it (PDEATHSIG)."""
        conn = self.acquire_ready(gate)
        try:
            conn.sock.settimeout(None)  # the job may carry large arguments
            send_msg(conn.sock, pickle.dumps(request), fds)
            conn.sock.settimeout(REPLY_TIMEOUT_S)
            data, _ = recv_msg(conn.sock)
            reply = pickle.loads(data)
            if not (isinstance(reply, Started) and reply.job_id == request.job_id):
                raise EOFError(f"the rank server answered job {request.job_id} with {reply!r}")
            return reply, conn.proc
        except BaseException as exc:
            self.stop()
            if isinstance(exc, (OSError, EOFError, pickle.UnpicklingError)):
                raise LaunchError("the rank server went away; run the cell again (a new one starts).") from None
            raise
        finally:
            self.lock.release()


_server = _Server()
atexit.register(_server.stop)


def prewarm(wait: bool = False) -> None:
    """Start the rank server now, so that the first ``run_ranks`` does not wait for ``import torch``; with
    ``wait=True``, return once it takes jobs (an interrupt ends the wait, and the server goes on starting)."""
    with interrupts_held() as gate:
        if wait:
            _server.acquire_ready(gate)
            _server.lock.release()
        else:
            with _server.lock:
                _server.start()


@dataclass(frozen=True)
class ServerState:
    """What the notebook holds of its rank server at one moment, for diagnostics and tests."""

    pid: int | None  # the server process, None when there is none
    alive: bool  # its process runs
    ready: bool  # its Ready has been read: it takes jobs
    forked: bool  # forked by the fork server (else started by this process)
    socket_open: bool  # the notebook's end of its socket is open (always, for a server the notebook holds)


def server_state() -> ServerState:
    conn = _server.conn
    if conn is None:
        return ServerState(None, False, False, False, False)
    return ServerState(conn.proc.pid, conn.alive(), conn.ready, conn.forked, conn.sock.fileno() != -1)


def shutdown_server() -> None:
    """Stop the rank server (the next launch starts a new one). No rank processes are left behind."""
    with interrupts_held(), _server.lock:
        _server.stop()


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
            f"{len(args)} extra argument(s): {exc}. Give it the parameters (rank, world_size, ...)."
        ) from None
    except ValueError:
        pass  # builtins without a signature: let them try
    try:
        return cloudpickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise LaunchError(
            f"fn or its args cannot be sent to the rank processes ({type(exc).__name__}: {exc}). "
            "Functions, closures and lambdas defined in cells travel fine; open files, locks, sockets, "
            "generators, threads or GPU handles do not: create those inside fn instead."
        ) from None


def loopback_env() -> dict:
    """Environment that keeps every socket of a launch on the loopback interface."""
    linux = sys.platform.startswith("linux")
    return {"MASTER_ADDR": "127.0.0.1", **({"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"} if linux else {})}


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    fn,
    world_size: int,
    args=(),
    backend: str = "auto",
    timeout: float = 60.0,
    *,
    init: bool = True,
    env: dict | None = None,
    debug: bool = False,
    stream: bool = True,
    quiet: bool = False,
) -> RankResults:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` rank processes and return their :class:`RankResults`
    (``.values`` in rank order); what it survives, an interrupt included, is in the launcher's README.

    - ``fn`` may be defined in a cell, a closure or a lambda; it and ``args`` travel by cloudpickle.
    - ``backend``: "auto" (NCCL with one GPU per rank when there are enough GPUs, else gloo on the CPU), "nccl"
      or "gloo". With ``init=False`` fn joins the process group itself (RANK, WORLD_SIZE, MASTER_ADDR,
      MASTER_PORT and MGPU_INIT_METHOD are set, loopback only).
    - ``timeout``: seconds for ``fn``, counted once every rank has joined the process group (joining gets
      ``supervise.JOIN_GRACE_S`` more); past it every rank's stacks are taken and :class:`RankTimeout` is raised.
    - ``env``: extra environment variables for the ranks only; ``debug``: TORCH_DISTRIBUTED_DEBUG=DETAIL;
      ``stream``: print each rank's output live as ``[rank k] ...`` lines; ``quiet``: no summary line.

    Raises :class:`LaunchError` for bad input or a rank server that died under the launch, :class:`RankError` when
    a rank raises or dies (the others are ended at once)."""
    payload = _check_request(fn, world_size, args, timeout)
    try:
        backend, reason = hardware.choose_backend(world_size, backend)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    with interrupts_held() as gate:
        # A cold start's import torch is waited for here (interruptibly), so the timeout counts the ranks only.
        _server.acquire_ready(gate)
        _server.lock.release()
        # Made in here: the job holds a selector (a file descriptor) from its first moment.
        job = Job(world_size, backend, reason, float(timeout), stream, quiet)
        try:
            _start(job, payload, init, debug, env, gate)
            with gate.allowed():  # where interrupts land (and in the cold-start wait): one owner per resource
                results = supervise(job)
        finally:
            job.finish()  # KeyboardInterrupt included: no rank, fd or folder outlives the cell
        return results


def _start(job: Job, payload: bytes, init: bool, debug: bool, extra_env: dict | None, gate) -> None:
    """Create the job's folder, its ranks' environment (torchrun's names, loopback only) and pipes; hand it over."""
    world_size = job.world_size
    job.job_dir = tempfile.mkdtemp(prefix="mgpu-job-")
    init_method = f"file://{os.path.join(job.job_dir, 'store')}"
    env = {  # defaults first: the notebook's environment overrides them, the loopback settings override that
        # NVLink multicast (NVLS) can take a host's GPUs out of service on the course machines: off unless asked.
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
        # torch's flight recorder, read when a launch hangs (mgpu_helpers.launcher.flight), in every launch
        # since a hang is not planned. torch 2.13 reads this name for gloo and NCCL alike (and warns that
        # NCCL's older TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated).
        "TORCH_FR_BUFFER_SIZE": str(flight.BUFFER_ENTRIES),
        **os.environ,
        **loopback_env(),
        "MASTER_PORT": str(free_loopback_port()),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MGPU_BACKEND": job.backend,
        "MGPU_INIT_METHOD": init_method,
        "MGPU_LAUNCHER_PID": str(os.getpid()),  # the process that runs py-spy on the ranks at a timeout
    }
    if debug:
        env.update(TORCH_DISTRIBUTED_DEBUG="DETAIL", NCCL_DEBUG=env.get("NCCL_DEBUG", "WARN"))
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    request = JobRequest(
        job_id=next(_job_ids),
        world_size=world_size,
        backend=job.backend,
        init=init,
        init_method=init_method,
        payload=payload,
        env=env,
        job_dir=job.job_dir,
        sys_path=list(sys.path),
        cwd=os.getcwd(),
        # torch's own timeout stays above ours, so that ours fires first and takes stacks
        pg_timeout_s=job.timeout_s + 60.0,
    )
    started, server_proc = _server.submit(request, job.open_pipes(), gate)
    job.attach_leader(started.leader_pid, server_proc)
