"""Native (C++) stacks of hung ranks, from ``py-spy dump --native``, beside faulthandler's Python stacks, which end at
the Python call (``all_reduce``). Beneath it py-spy shows where the rank waits in C++: ``c10d::Work::wait`` (the backend
has the collective), ``gloo::rendezvous::Context::connectFullMesh`` over ``c10d::FileStore::wait`` (a peer never
joined), NCCL's and CUDA's own functions on a GPU. py-spy reads them from outside (ptrace), so it works on a rank whose
own threads cannot run. Optional: where py-spy is missing or may not attach (a container without ``CAP_SYS_PTRACE``,
Yama's ``ptrace_scope``, macOS without root), :func:`take` says why in one line and the report goes on without them."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE

# The whole native dump of every rank, at once: py-spy pauses a rank while it reads it (under a second each on
# an idle machine); a loaded one gets this long before the launch's error is raised without them.
TIMEOUT_S = 8.0

_PYTHON_FRAME = re.compile(r"\([^()]*:\d+\)$")  # "all_reduce (torch/distributed/distributed_c10d.py:3252)"
_GLUE = ("pybind11::", "0x")  # pybind11's dispatch between Python and C++, and frames without a symbol


def pid_path(job_dir: str, rank: int) -> str:
    return os.path.join(job_dir, f"pid-{rank}")


PR_SET_PTRACER = 0x59616D61  # "Yama"
LAUNCHER_PID = "MGPU_LAUNCHER_PID"  # in every rank's environment: the kernel that launched it, and runs py-spy


def _yama_scope() -> int | None:
    """Yama's ptrace_scope (0: any process of the user may attach, 1: only its ancestors, 2: only root, 3:
    nobody), or None without Yama."""
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def _allow_ptracer(pid: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(ctypes.c_int(PR_SET_PTRACER), ctypes.c_ulong(pid), ctypes.c_ulong(0), 0, 0)


def note_pid(job_dir: str, rank: int, launcher_pid: int | None) -> None:
    """In a rank, as it starts: write its pid where :func:`take` finds it. Yama's scope 1, the default of Ubuntu
    and Debian, lets only a process's ancestors attach to it, and the notebook's py-spy is not one of the rank's.
    Where py-spy is installed, such a rank names the kernel that launched it as its tracer (``PR_SET_PTRACER``):
    Yama then lets that kernel and the processes it starts attach to the rank, and nothing else of the user's."""
    Path(pid_path(job_dir, rank)).write_text(str(os.getpid()))
    if launcher_pid and _yama_scope() == 1 and py_spy() is not None:
        _allow_ptracer(launcher_pid)


def py_spy() -> str | None:
    """The py-spy program: beside this Python (a kernel's PATH may lack its environment's bin), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def take(job_dir: str, ranks: list[int], timeout_s: float = TIMEOUT_S) -> tuple[dict[int, str], str | None]:
    """``py-spy dump --native`` of each of ``ranks`` (still running), all at once, within ``timeout_s``.
    Returns ``({rank: dump text}, why)``: ``why`` is None when every rank's dump came, else one line saying why
    some or all did not (py-spy missing, not allowed to attach, too slow)."""
    program = py_spy()
    if program is None:
        return {}, "py-spy is not installed (pip install py-spy adds them)"
    running, dumps, problems = {}, {}, {}
    deadline = time.monotonic() + timeout_s
    try:
        for r in ranks:
            try:
                pid = int(Path(pid_path(job_dir, r)).read_text())
            except (OSError, ValueError):
                problems[r] = "its pid was never written (it did not start)"
                continue
            try:
                command = [program, "dump", "--native", "--pid", str(pid)]
                running[r] = subprocess.Popen(command, stdout=PIPE, stderr=PIPE, stdin=subprocess.DEVNULL, text=True)
            except OSError as exc:
                problems[r] = f"py-spy could not start: {exc}"
        for r, proc in running.items():
            try:
                out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems[r] = f"py-spy took over {timeout_s:g} s"
                continue
            if proc.returncode == 0 and out.strip():
                dumps[r] = out.strip()
            else:
                said = (err.strip() or out.strip() or f"exit code {proc.returncode}").splitlines()[0]
                problems[r] = f"py-spy could not read it: {said}"
    finally:
        # None is left running, whatever happened (too slow, an interrupt): a py-spy holds its rank stopped.
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()  # not its pipes: a child it left may hold them open
            proc.stdout.close()
            proc.stderr.close()
    return dumps, (f"rank(s) {sorted(problems)}, " + "; ".join(sorted(set(problems.values())))) if problems else None


def _short(name: str) -> str:
    """A C++ symbol without its template and parameter lists: ``c10d::Work::wait``, not a line of 2000 characters."""
    while (shorter := re.sub(r"<[^<>]*>|\([^()]*\)", "", name)) != name:
        name = shorter
    return name


def beneath_python(dump: str) -> list[str]:
    """The native frames of the main thread above its innermost Python frame, innermost first: where in C++ the
    rank waits, below the Python call that faulthandler's stack ends at. pybind11's glue and frames without a
    symbol are left out; empty when the main thread is not found or is in Python code itself."""
    blocks = [b for b in re.split(r"\n(?=Thread )", dump) if b.startswith("Thread ")]
    main = next((b for b in blocks if '"MainThread"' in b.splitlines()[0]), blocks[0] if blocks else "")
    frames = []
    for line in main.splitlines()[1:]:
        frame = line.strip()
        if _PYTHON_FRAME.search(frame):
            break
        if not frame or frame.startswith(_GLUE):
            continue
        symbol, _, lib = frame.rpartition(" (")
        frames.append(f"{_short(symbol)} ({lib}" if symbol else frame)
    return frames
