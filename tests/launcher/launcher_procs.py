"""What the launcher's tests share: watching processes go, and a real signal at a chosen line of the launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

import psutil

from mgpu_helpers.launcher import launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER_DIR = os.path.dirname(os.path.abspath(launch.__file__))


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: it runs no more)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(check, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def wait_gone(pids, seconds: float = 10.0) -> bool:
    return wait_until(lambda: all(gone(p) for p in pids), seconds)


@contextmanager
def cell_output(write):
    """The cell's output (``sys.stdout``) is ``write(text)`` within the block: a widget, a spy, a slow reader."""

    class Cell:
        def write(self, text):
            write(text)

        def flush(self):
            pass

    real, sys.stdout = sys.stdout, Cell()
    try:
        yield
    finally:
        sys.stdout = real


def pids_from(outputs: dict) -> list[int]:
    """Rank functions print 'pid <n>' first; collect those pids from an error's outputs."""
    return [int(ln.split()[1]) for lines in outputs.values() for ln in lines if ln.startswith("pid ")]


def signal_at_line(n: int, signum: int, after=None):
    """A trace function that raises ``signum`` at the n-th line of the launcher's code run in this thread.

    With ``after`` (a function name), lines are counted from the moment a function of that name in the
    launcher returned. A real signal, not a raised exception: it meets whatever handler is installed at that
    line, exactly as the interrupt button or a timer would.
    """
    seen = [0]
    armed = [after is None]

    def local(frame, event, arg):
        if event == "return" and frame.f_code.co_name == after:
            armed[0] = True
        elif event == "line" and armed[0]:
            seen[0] += 1
            if seen[0] == n:
                sys.settrace(None)
                signal.raise_signal(signum)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(LAUNCHER_DIR) else None

    return tracer


def start_kernel(tmp_path, body: str) -> subprocess.Popen:
    """A stand-in notebook kernel: a Python process running ``body`` with this copy of the library, stdout piped."""
    script = tmp_path / "kernel.py"
    script.write_text(f"import sys\nsys.path.insert(0, {ROOT!r})\n" + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)


def printed_pids(kernel: subprocess.Popen, n: int, marker: str = "pid ") -> list[list[int]]:
    """The numbers after ``marker`` on the first ``n`` lines of a kernel's output that have it."""
    found = []
    while len(found) < n:
        line = kernel.stdout.readline()
        assert line, "the launching process ended early"
        if marker in line:
            found.append([int(x) for x in line.split(marker)[1].split()])
    return found
