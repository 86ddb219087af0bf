"""A pytest plugin that keeps what nbval ran: each notebook of notebooks/ with its outputs and widget state.

nbval runs a notebook cell by cell in one kernel and compares outputs, then throws the run away. The browser
test (tests/notebooks/test_browser.py) needs exactly that run -- every cell's outputs and the widgets' state -- to show
the notebook in JupyterLab without running it a second time. Loaded from ``addopts`` in pyproject.toml
(``-p keep_executed``), this plugin listens to the kernel messages nbval reads and writes
``build/executed/<name>.ipynb`` when a notebook's last cell is done:

- the notebook as committed, each code cell with the outputs its run produced (a learner's copy runs with its
  hidden tests put back, see ``learner_copies``; they are left out again here) (``execution_count`` 1, 2, ...
  in the order the cells ran; a cell nbval skipped keeps none and no count);
- the widget state in the notebook metadata (``widgets`` / ``application/vnd.jupyter.widget-state+json``),
  which JupyterLab's widget manager loads when the notebook is opened, so every widget view renders without a
  kernel behind it;
- ``metadata.mgpu_executed``: the sha256 of the source notebook, the cells that failed, whether every cell ran.

Messages are turned into outputs and widget state by nbclient's own code (``NotebookClient.process_message``,
as ``jupyter nbconvert --execute`` with ``store_widget_state`` does), with its stand-in for the frontend's
Output widget made passive: what a cell prints inside an ``ipywidgets.Output`` lands in that widget's state,
as in JupyterLab, and nothing is sent to the kernel. The state is built from the messages rather than asked
from the kernel at the end (``Widget.get_manager_state``) because an Output widget's outputs live in the
frontend: the kernel's copy of them is empty. Messages nbval had no reason to read (those that come after a
notebook's last cell went idle) are drained from the kernel before nbval stops it.

The plugin only listens: it never sends to the kernel, never fails a test and, if something goes wrong in it,
warns and writes nothing for that notebook. It works under pytest-xdist (``--dist loadfile`` keeps a notebook's
cells, and so its file, on one worker). Options: ``--executed-dir`` (default ``<rootdir>/build/executed``) and
``--executed-from`` (a folder whose notebooks are kept; repeatable; default ``<rootdir>/notebooks``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import warnings

import pytest

META_KEY = "mgpu_executed"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def pytest_addoption(parser):
    group = parser.getgroup("mgpu-executed", "keep what nbval ran (keep_executed)")
    group.addoption(
        "--executed-dir",
        default=None,
        metavar="DIR",
        help="where the run notebooks go (default: <rootdir>/build/executed)",
    )
    group.addoption(
        "--executed-from",
        action="append",
        default=None,
        metavar="DIR",
        help="a folder whose notebooks are kept when nbval runs them (repeatable; default: <rootdir>/notebooks)",
    )


def pytest_configure(config):
    root = str(config.rootpath)
    out = config.getoption("executed_dir") or os.path.join(root, "build", "executed")
    sources = config.getoption("executed_from") or [os.path.join(root, "notebooks")]
    config._mgpu_executed = (os.path.abspath(out), [os.path.realpath(s) for s in sources])


def _nbval_cell_class():
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:  # nbval missing: nothing to keep
        return None
    return IPyNbCell


def _recorder(item) -> _Recorder | None:
    """The recorder of ``item``'s notebook, made on its first cell; None where the notebook is not kept."""
    cls = _nbval_cell_class()
    if cls is None or not isinstance(item, cls):
        return None
    nbfile = item.parent
    rec = getattr(nbfile, "_mgpu_recorder", False)
    if rec is False:
        rec = None
        out, sources = getattr(item.config, "_mgpu_executed", (None, []))
        path = os.path.realpath(str(nbfile.fspath))
        if out and os.path.dirname(path) in sources:
            try:
                rec = _Recorder(nbfile, path, out)
            except Exception as exc:  # never let the recorder break nbval
                warnings.warn(f"keep_executed: not keeping {path}: {exc!r}", stacklevel=2)
        nbfile._mgpu_recorder = rec
    return rec


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    rec = _recorder(item)
    if rec is not None:
        rec.guard(rec.attach)
    outcome = yield
    if rec is not None:
        exc = outcome.excinfo[1] if outcome.excinfo else None
        rec.guard(
            rec.cell_done,
            item,
            "skipped" if isinstance(exc, pytest.skip.Exception) else "failed" if exc is not None else "passed",
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    rec = _recorder(item)
    if rec is not None and (nextitem is None or nextitem.parent is not item.parent):
        rec.guard(rec.finish)  # before nbval's teardown stops the kernel
    yield


class _Recorder:
    """Listens to one notebook's kernel under nbval and writes the notebook as it ran."""

    def __init__(self, nbfile, path: str, out_dir: str):
        from nbclient import NotebookClient
        from nbclient.output_widget import OutputWidget

        class PassiveOutputWidget(OutputWidget):
            """nbclient's stand-in for the frontend's Output widget, minus the sync back to the kernel."""

            def send(self, *args, **kwargs):
                pass

        self.nbfile, self.path, self.out_dir = nbfile, path, out_dir
        self.sha256 = source_sha256(path)
        # The notebook nbval collected: for a learner's copy, the version with its hidden tests (learner_copies).
        self.nb = copy.deepcopy(nbfile.nb)
        self.code_cells = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
        for i in self.code_cells:
            self.nb.cells[i].outputs = []
            self.nb.cells[i].execution_count = None
        self.client = NotebookClient(self.nb, record_timing=False, store_widget_state=True)
        self.client.reset_execution_trackers()
        self.client.widget_registry = {"@jupyter-widgets/output": {"OutputModel": PassiveOutputWidget}}
        self.client.clear_before_next_output = False
        self.messages: list[dict] = []
        self.cell_of: dict[str, int] = {}  # execute request id -> index in nb.cells
        self.last_msg_id: str | None = None
        self.count = 0
        self.failed: list[int] = []  # code-cell numbers, as nbval names its items ("Cell 3")
        self.skipped: list[int] = []
        self.ran: set[int] = set()
        self.kernel = None
        self.broken: str | None = None

    def guard(self, fn, *args):
        if self.broken:
            return
        try:
            fn(*args)
        except Exception as exc:  # warn, keep nothing for this notebook, leave nbval's result alone
            self.broken = repr(exc)
            warnings.warn(f"keep_executed: not keeping {self.path}: {exc!r}", stacklevel=2)

    def attach(self):
        """Wrap the nbval kernel's message reads (once): every iopub message it reads is kept here too."""
        kernel = self.nbfile.kernel
        if kernel is None or kernel is self.kernel:
            return
        self.kernel = kernel
        get_message, execute = kernel.get_message, kernel.execute_cell_input

        def get_message_kept(stream, timeout=None):
            msg = get_message(stream, timeout=timeout)
            if stream == "iopub":
                self.messages.append(msg)
            return msg

        def execute_kept(cell_input, allow_stdin=None):
            self.last_msg_id = execute(cell_input, allow_stdin=allow_stdin)
            return self.last_msg_id

        kernel.get_message = get_message_kept
        kernel.execute_cell_input = execute_kept

    def cell_done(self, item, result: str):
        index = self.code_cells[item.cell_num]
        if self.last_msg_id is not None and self.last_msg_id not in self.cell_of:
            self.count += 1
            self.cell_of[self.last_msg_id] = index
            self.nb.cells[index].execution_count = self.count
            self.ran.add(index)
            self.client.clear_before_next_output = False
        if result == "failed":
            self.failed.append(item.cell_num)
        elif result == "skipped":
            self.skipped.append(item.cell_num)
        self._process()

    def _process(self):
        from nbclient.exceptions import CellExecutionComplete

        messages, self.messages = self.messages, []
        client = self.client
        for msg in messages:
            msg = dict(msg, header=dict(msg["header"]))  # nbclient may rewrite the header's msg_type
            msg_type = msg["msg_type"]
            parent = msg["parent_header"].get("msg_id")
            index = self.cell_of.get(parent)
            if msg_type.startswith("comm"):
                client.handle_comm_msg([], msg, index if index is not None else -1)
            elif msg_type in ("status", "execute_input"):
                continue
            elif index is not None:
                cell = self.nb.cells[index]
                count = cell.execution_count
                try:
                    client.process_message(msg, cell, index)
                except CellExecutionComplete:
                    pass
                cell.execution_count = count
                for out in cell.outputs:
                    if out.get("output_type") == "execute_result":
                        out["execution_count"] = cell.execution_count
            elif client.output_hook_stack.get(parent):  # a callback printing into an Output widget
                hook = client.output_hook_stack[parent][-1]
                if msg_type == "clear_output":
                    hook.clear_output([], msg, -1)
                else:
                    try:
                        hook.output([], msg, None, -1)
                    except ValueError:
                        pass

    def _drain(self):
        """Read what is left on the kernel's iopub channel (messages after the last cell went idle)."""
        from queue import Empty

        kernel = self.kernel
        if kernel is None or not kernel.is_alive():
            return
        for _ in range(10_000):
            try:
                self.messages.append(kernel.kc.get_iopub_msg(timeout=0.05))
            except Empty:
                break

    def finish(self):
        import nbformat

        self._drain()
        self._process()
        for i in self.code_cells:
            self.nb.cells[i].outputs = _merge_streams(self.nb.cells[i].outputs)
        self.nb.metadata.pop("widgets", None)
        self.client.set_widgets_metadata()
        n_code = len(self.code_cells)
        self.nb.metadata[META_KEY] = {
            "source_sha256": self.sha256,
            "code_cells": n_code,
            "cells_run": len(self.ran),
            "complete": len(self.ran) + len(self.skipped) == n_code,
            "failed_cells": self.failed,
            "skipped_cells": self.skipped,
        }
        view = getattr(self.nbfile, "learner_view", None)  # the run as the learner's copy shows it
        shown = view(self.nb) if view is not None else self.nb
        os.makedirs(self.out_dir, exist_ok=True)
        target = os.path.join(self.out_dir, os.path.basename(self.path))
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            nbformat.write(shown, f)
        os.replace(tmp, target)


def _merge_streams(outputs):
    """Adjacent stream outputs of one name as one (a cell's prints arrive in many messages)."""
    merged = []
    for out in outputs:
        if (
            merged
            and out.get("output_type") == "stream"
            and merged[-1].get("output_type") == "stream"
            and merged[-1].get("name") == out.get("name")
        ):
            merged[-1]["text"] += out["text"]
        else:
            merged.append(out)
    return merged


def source_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def status(executed: str, source: str) -> str:
    """What ``executed`` (a notebook this plugin wrote) is for ``source`` as it is now: ``"missing"``,
    ``"stale"`` (written from another version of the source, or by an interrupted run), ``"failed"`` (nbval
    failed some of its cells: ``metadata.mgpu_executed.failed_cells``) or ``"ok"``."""
    try:
        with open(executed, encoding="utf-8") as f:
            meta = json.load(f).get("metadata", {}).get(META_KEY, {})
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError):
        return "stale"
    if meta.get("source_sha256") != source_sha256(source) or not meta.get("complete"):
        return "stale"
    return "failed" if meta.get("failed_cells") else "ok"
