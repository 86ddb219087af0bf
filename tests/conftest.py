"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import signal

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The suite's notebooks and checkers share one fork server (mgpu_helpers/launcher/forkserver.py), of a key of its
# own: it goes two idle minutes after the last test instead of a learner's ten.
os.environ.setdefault("MGPU_FORKSERVER_IDLE_S", "120")


@pytest.fixture(scope="module")
def vendor():
    """reveal.js, MathJax and friends in build/vendor (fetched once with npm); skips, saying why, without npm."""
    from mgpu_helpers.tools import export

    try:
        return export.ensure_vendor(os.path.join(ROOT, "build", "vendor"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test drew, so figures do not pile up across the suite."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(autouse=True)
def _interrupts_raise():
    """SIGINT raises KeyboardInterrupt inside every test, as in a Jupyter kernel.

    A process started as a background job of a non-interactive shell (``make test &``, nohup, some CI
    runners) inherits SIGINT ignored; the launcher's tests press the interrupt button with SIGINT and would
    then see nothing happen."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def own_rank_server():
    """The launcher's robustness tests run with a rank server that this process starts itself
    (``MGPU_FORKSERVER=0``): they check the process tree under this process, which a server forked by the fork
    server is not part of. ``tests/launcher/test_forkserver.py`` tests the forked one."""
    from mgpu_helpers.launcher import launch

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MGPU_FORKSERVER", "0")
        launch.shutdown_server()
        yield
        launch.shutdown_server()
