"""The course in a real JupyterLab, driven by a real browser, as a class would see it.

Each notebook of notebooks/ is opened once, as nbval ran it, without running a cell again. ``make test-main``
runs every notebook under nbval, and the pytest plugin ``keep_executed`` keeps each run in
build/executed/<name>.ipynb: the outputs the kernel produced for each cell and the widget state at the end
(notebook metadata ``widgets``, which JupyterLab's widget manager loads when it opens a notebook). Where a
notebook's kept run is missing or stale (``make test-browser`` alone on a fresh clone, or a notebook edited
since), this test first runs nbval on those notebooks, through the same plugin, in a subprocess (``python -m
pytest notebooks/NN.ipynb --nbval-lax --nbval-current-env``), so it never silently tests less. A notebook whose
kept run failed is reported failed here without being run again (``make test-main`` says why).

One JupyterLab server (127.0.0.1, a free port, a token, no network) serves a copy of those kept notebooks with
projection mode on for its kernels (MGPU_PROJECTION=1). Headless Chromium (Debian's ``chromium``, driven by
Playwright's driver; no browser download) loads JupyterLab once, at 1280x720, and opens every notebook in it in
turn, each exactly once. A notebook gets a kernel (JupyterLab's widget manager needs one to exist) but runs
nothing in it. The test checks:

- every code cell has the outputs of its run (an execution count; nbval-skipped cells excepted), as kept, and
  error outputs appear only in cells tagged ``raises-exception``;
- every widget the notebook displays is rendered as DOM from the saved state (ipywidgets views with their
  controls, not just a model; what a widget drew into an Output widget shows inside it);
- screenshots of each notebook (at its first widget or figure, and at its end) go to build/screenshots/.

Live, in a two-cell notebook the test writes itself (``import mgpu_helpers as mh; env = mh.setup()`` and the
all-reduce widget): projection mode reaches the kernel, and the widget's "Run" button really runs ranks
through the kernel and draws its figure. And RISE presents a notebook as a slideshow, offline.

What the cells print is nbval's job (``make test-main``); here only what a browser adds is checked.
Marked ``browser`` and run by ``make test-browser`` (``make test`` runs it after the main suite). Skipped,
saying why, when Chromium or Playwright is missing.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import keep_executed as executed
import pytest

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
EXECUTED = os.path.join(ROOT, "build", "executed")  # nbval's runs, kept by keep_executed
SHOTS = os.path.join(ROOT, "build", "screenshots")
LIVE = "live/run_button.ipynb"  # the notebook the live test writes and runs
LIVE_CELLS = [
    "import mgpu_helpers as mh\n\nenv = mh.setup()",
    "mh.widgets.allreduce.show_allreduce(mh.runs.collectives.run_and_draw)",
]
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 720}  # a classroom projector
NOTEBOOK_TIMEOUT = float(os.environ.get("MGPU_BROWSER_NOTEBOOK_TIMEOUT", "600"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_browser_test_finds_the_notebooks():
    assert len(NOTEBOOKS) >= 1, "notebooks/*.ipynb matched nothing: the browser test would test nothing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_live_notebook(path: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nb.cells = [nbformat.v4.new_code_cell(src) for src in LIVE_CELLS]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    nbformat.write(nb, path)


def _write_settings(settings_dir: str) -> None:
    """JupyterLab user settings for a quiet, deterministic page: no news or update checks (no network), every
    cell attached to the DOM (so widget views can be counted), no autosave."""
    settings = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, value in settings.items():
        path = os.path.join(settings_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(value, f)


def _kept(path: str) -> str:
    return os.path.join(EXECUTED, os.path.basename(path))


def _keep_missing_runs(selected: list[str]) -> list[str]:
    """Run nbval (with keep_executed, from pyproject's addopts) on each of ``selected`` whose kept
    run is missing or stale; a failed run is kept as failed, not run again. Returns what nbval printed, if it
    ran."""
    todo = [p for p in selected if executed.status(_kept(p), p) in ("missing", "stale")]
    if not todo:
        return []
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *[os.path.relpath(p, ROOT) for p in todo],
        "--nbval-lax",
        "--nbval-current-env",
        "--nbval-cell-timeout=600",
        "-p",
        "no:randomly",
        "-q",
        "--no-header",
        f"--executed-dir={EXECUTED}",
    ]
    if len(todo) > 1:
        cmd += ["-n", "2", "--dist", "loadfile"]
    print(
        f"no current nbval run kept for {len(todo)} notebook(s); running them under nbval first: " + " ".join(cmd[3:])
    )
    t0 = time.monotonic()
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    print(f"nbval: exit {run.returncode} in {time.monotonic() - t0:.0f} s; {run.stdout.strip().splitlines()[-1:]}")
    return [run.stdout[-4000:], run.stderr[-2000:]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    """``(base_url, token, page_factory)``: a JupyterLab server on a copy of the kept runs and a browser."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing (pip install -e '.[test]')")
    # The notebooks this session opens (all of them, less what -k deselected); RISE shows the first notebook.
    selected = {
        item.callspec.params["path"]
        for item in request.session.items
        if hasattr(item, "callspec") and "path" in item.callspec.params
    } | set(NOTEBOOKS[:1])
    _keep_missing_runs(sorted(selected))
    work = tmp_path_factory.mktemp("lab")
    os.makedirs(work / "notebooks")
    # JupyterLab renders a widget (an unsafe mime type) only in a trusted notebook, as it trusts the outputs of
    # cells it ran itself: the kept runs are signed with a notary (key and database) of this server's own.
    import nbformat
    from nbformat.sign import NotebookNotary

    notary = [
        "--NotebookNotary.db_file=" + str(work / "nbsignatures.db"),
        "--NotebookNotary.secret_file=" + str(work / "notebook_secret"),
    ]
    signer = NotebookNotary(db_file=str(work / "nbsignatures.db"), secret_file=str(work / "notebook_secret"))
    for path in NOTEBOOKS:
        if os.path.exists(_kept(path)):
            shutil.copy(_kept(path), work / "notebooks")
            signer.sign(nbformat.read(_kept(path), as_version=4))
    signer.store.close()
    _write_live_notebook(str(work / LIVE))
    _write_settings(str(work / "settings"))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={work}",
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={work / 'settings'}",
        f"--LabApp.workspaces_dir={work / 'workspaces'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *notary,
    ]
    if os.getuid() == 0:
        cmd.append("--allow-root")
    env = dict(os.environ, MGPU_PROJECTION="1", JUPYTER_RUNTIME_DIR=str(work / "runtime"), PYTHONUNBUFFERED="1")
    log = open(work / "jupyterlab.log", "w")
    server = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("JupyterLab did not start:\n" + (work / "jupyterlab.log").read_text()[-3000:])
            time.sleep(0.5)
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        context = browser.new_context(viewport=VIEWPORT)
        try:
            yield base, token, context
        finally:
            context.close()
            browser.close()
            pw.stop()
    finally:
        for ending in _ENDING:
            ending.join(timeout=60)
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


_ENDING: list[threading.Thread] = []  # kernel shutdowns still under way (joined before the server stops)


def _shutdown_kernels(base: str, token: str, wait: bool = True) -> None:
    """End every kernel the server started (and with it the notebook's rank server).

    ``wait=False`` ends them in a background thread: the sessions to end are read now, so the next
    notebook's kernel, started meanwhile, is not among them.
    """
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)

    def end():
        for s in sessions:
            req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()

    if wait:
        end()
    else:
        _ENDING.append(threading.Thread(target=end, daemon=True))
        _ENDING[-1].start()


STATE_JS = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
  return {
    status: kernel ? kernel.status : 'none',
    running: cells.filter(c => c.model.executionState === 'running').length,
    unrun: cells.filter(c => c.model.executionCount === null && c.model.sharedModel.getSource().trim()).length,
    done: window.__mgpuRunAll || null,
    cells: cells.length,
  };
}"""

REPORT_JS = (
    """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  return nb.content.widgets.filter(c => c.model.type === 'code').map((c, i) => {
    const outputs = c.model.outputs.toJSON();
    const views = Array.from(c.node.querySelectorAll('.jp-OutputArea-output .jupyter-widgets'))
      .filter(el => !el.parentElement.closest('.jupyter-widgets'));   // top-level views only
    return {
      index: i,
      source: c.model.sharedModel.getSource().slice(0, 120),
      execution_count: c.model.executionCount,
      outputs: outputs.length,
      tags: c.model.getMetadata('tags') || [],
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      widget_outputs: outputs.filter(o => o.data && o.data['"""
    + WIDGET_VIEW
    + """']).length,
      widget_views: views.length,
      controls: views.map(v => (v.matches('.widget-inline-hbox, .widget-html, .widget-label') ? 1 : 0) +
        v.querySelectorAll('.widget-slider, .widget-button, .widget-dropdown, .widget-radio-box, ' +
          '.widget-checkbox, .widget-text, .widget-html, .widget-label, .widget-progress, .widget-output').length),
      widget_errors: views.filter(v => /Error displaying widget|Error rendering/.test(v.textContent)).length,
      widget_texts: views.filter(v => /Error|Loading widget/.test(v.textContent)).map(v => v.textContent.slice(0, 120)),
      images: c.node.querySelectorAll('.jp-OutputArea-output img').length,
    };
  });
}"""
)


def _run_all(page, name: str) -> dict:
    """Run every cell of the open notebook (its kernel idle: :func:`_open`) and wait until all are done."""
    started = time.monotonic()
    page.evaluate("""() => {
      window.__mgpuRunAll = null;
      window.jupyterapp.commands.execute('runmenu:run-all')
        .then(r => { window.__mgpuRunAll = {ok: String(r)}; })
        .catch(e => { window.__mgpuRunAll = {error: String(e)}; });
    }""")
    deadline = time.monotonic() + NOTEBOOK_TIMEOUT
    quiet = 0
    while True:
        time.sleep(0.2)
        state = page.evaluate(STATE_JS)
        quiet = quiet + 1 if (state["status"] == "idle" and state["running"] == 0 and state["done"]) else 0
        if quiet >= 3:  # idle, nothing running, run-all resolved: three looks in a row (0.6 s)
            state["run_s"] = time.monotonic() - started
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: still running after {NOTEBOOK_TIMEOUT:.0f} s: {state}")


def _click_run_buttons(page, name: str) -> int:
    """Click each widget's Run button (real ranks through the kernel's comm) and wait for its figure."""
    clicked = 0
    buttons = page.locator(".jp-OutputArea-output .jupyter-widgets button.widget-button", has_text="Run")
    for k in range(buttons.count()):
        button = buttons.nth(k)
        view = button.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][last()]")
        before = view.locator(".widget-output img").count()
        button.scroll_into_view_if_needed()
        button.click()
        try:
            page.wait_for_function(
                "([el, n]) => el.querySelectorAll('.widget-output img').length > n",
                arg=[view.element_handle(), before],
                timeout=180_000,
            )
        except Exception as exc:  # the widget prints errors into its output: show them
            raise AssertionError(f"{name}: Run button {k} drew no figure: {view.inner_text()[-600:]}") from exc
        clicked += 1
    return clicked


def _screenshot(page, stem: str) -> list[str]:
    os.makedirs(SHOTS, exist_ok=True)
    paths = []
    target = page.locator(
        ".jp-OutputArea-output .jupyter-widgets.widget-vbox, .jp-OutputArea-output .jupyter-widgets.widget-box"
    ).first
    if not target.count():
        target = page.locator(".jp-OutputArea-output img").first
    if target.count():
        target.scroll_into_view_if_needed()
        page.wait_for_timeout(100)
        paths.append(os.path.join(SHOTS, f"{stem}.png"))
        page.screenshot(path=paths[-1])
    last = page.locator(".jp-Notebook .jp-Cell").last
    last.scroll_into_view_if_needed()
    page.wait_for_timeout(100)
    paths.append(os.path.join(SHOTS, f"{stem}-end.png"))
    page.screenshot(path=paths[-1])
    return paths


@pytest.fixture(scope="module")
def lab_page(lab):
    """``(page, page_errors)``: one JupyterLab page, loaded once; each test opens its notebook in it.

    Loading JupyterLab is the browser's costliest step (seconds of JavaScript on a busy 2-core machine): done
    once, not once per notebook. ``page_errors`` collects the page's uncaught errors; each test clears it.
    """
    base, token, context = lab
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/lab?reset&token={token}", wait_until="domcontentloaded")
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell && "
        "window.jupyterapp.commands.hasCommand('docmanager:open')",
        timeout=300_000,
    )
    page.evaluate("() => window.jupyterapp.restored")
    try:
        yield page, errors
    finally:
        page.close()


OPEN_JS = """async (path) => {
  const app = window.jupyterapp;
  const nb = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await nb.context.ready;
  app.shell.activateById(nb.id);
  return nb.id;
}"""

# Close the notebook without JupyterLab's "save your changes?" dialog (the copy is scratch).
CLOSE_JS = """() => {
  for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) { w.dispose(); }
}"""


# Every widget output of the open notebook has its view (or an error in its place): rendering is done.
RENDERED_JS = (
    """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  return nb.content.widgets.filter(c => c.model.type === 'code').every(c => {
    const wanted = c.model.outputs.toJSON().filter(o => o.data && o.data['"""
    + WIDGET_VIEW
    + """']).length;
    const views = Array.from(c.node.querySelectorAll('.jp-OutputArea-output .jupyter-widgets'))
      .filter(el => !el.parentElement.closest('.jupyter-widgets'));
    return views.length >= wanted;
  });
}"""
)

# jupyterlab_widgets (3.0.x) races with itself when a notebook opens with saved state: the restore that a
# kernel connecting starts can end (and mark the manager restored) before the notebook's saved models are all
# made, and a view asked for in between says "model not found" for good. A learner's reload fixes it; here
# the output is rendered again (set to itself), which asks the manager for the model again.
RERENDER_JS = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  let n = 0;
  for (const c of nb.content.widgets.filter(c => c.model.type === 'code')) {
    const m = c.outputArea.model;
    c.outputArea.widgets.forEach((w, k) => {
      if (k < m.length && /Error displaying widget: model not found/.test(w.node.textContent)) {
        m.set(k, m.get(k).toJSON()); n += 1;
      }
    });
  }
  return n;
}"""

PRESENT_JS = """() => {   // what a teacher does before projecting: hide the side bars, presentation mode on
  const app = window.jupyterapp;
  app.shell.collapseLeft(); app.shell.collapseRight();
  if (!app.shell.presentationMode) return app.commands.execute('application:toggle-presentation-mode');
}"""


HIDE_DISCONNECTED_JS = """() => {
  if (document.getElementById('mgpu-hide-disconnected')) return;
  const style = document.createElement('style');
  style.id = 'mgpu-hide-disconnected';
  style.textContent = '.jupyter-widgets-disconnected::before { display: none !important; }';
  document.head.appendChild(style);
}"""


def _open(page, path: str) -> None:
    """Open ``path`` (relative to the server's root) and wait until its kernel is idle."""
    page.evaluate(OPEN_JS, path)
    page.wait_for_function(
        "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        " return w && w.content && w.sessionContext && w.sessionContext.session &&"
        " w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }",
        timeout=300_000,
    )  # a kernel start on a busy 2-core machine


def _check_rendered(name: str, cells: list[dict]) -> None:
    bad = [
        f"cell {c['index']} ({c['source'][:60]!r}): {c['errors']}"
        for c in cells
        if c["errors"] and "raises-exception" not in c["tags"]
    ]
    assert not bad, f"{name}: errors in cells not tagged raises-exception:\n" + "\n".join(bad)
    for c in cells:
        if c["widget_outputs"]:
            assert c["widget_views"] >= c["widget_outputs"] and not c["widget_errors"], (
                f"{name}: cell {c['index']} has a widget model but no rendered view: {c}"
            )
            assert all(n > 0 for n in c["controls"]), f"{name}: cell {c['index']}: a widget without controls"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_as_nbval_ran_it_shows_in_jupyterlab_with_widgets_rendered(lab, lab_page, path):
    import nbformat

    base, token, _ = lab
    page, console = lab_page
    console.clear()
    name = os.path.basename(path)
    stem = name.rsplit(".", 1)[0]
    state = executed.status(_kept(path), path)
    if state == "failed":
        failed = nbformat.read(_kept(path), as_version=4).metadata[executed.META_KEY]["failed_cells"]
        pytest.fail(f"{name}: nbval failed its code cells {failed} (make test-main says why); not opened")
    assert state == "ok", f"{name}: no complete nbval run of the notebook as it is now in {EXECUTED} ({state})"
    kept = nbformat.read(_kept(path), as_version=4)
    skipped = set(kept.metadata[executed.META_KEY].get("skipped_cells", []))
    code = [c for c in kept.cells if c.cell_type == "code"]
    t0 = time.monotonic()
    try:
        _open(page, f"notebooks/{name}")
        t_open = time.monotonic() - t0
        page.evaluate(PRESENT_JS)
        try:
            page.wait_for_function(RENDERED_JS, timeout=60_000)
        except Exception:  # the checks below say which widget did not render
            pass
        rerendered = 0
        for _ in range(10):
            again = page.evaluate(RERENDER_JS)
            if not again:
                break
            rerendered += again
            page.wait_for_timeout(1000)
        cells = page.evaluate(REPORT_JS)
        assert len(cells) == len(code), f"{name}: JupyterLab shows {len(cells)} code cells, the file has {len(code)}"
        unrun = [c["index"] for c in cells if c["execution_count"] is None and c["index"] not in skipped]
        assert not unrun, f"{name}: code cells {unrun} have no run (no execution count) in the kept notebook"
        # Nothing ran again: the counts and outputs are the kept run's.
        assert [c["execution_count"] for c in cells] == [c.execution_count for c in code], (
            f"{name}: the execution counts differ from nbval's run: a cell ran in the browser"
        )
        assert [c["outputs"] for c in cells] == [len(c.outputs) for c in code], f"{name}: outputs differ from the file"
        _check_rendered(name, cells)
        expected = sum(c["widget_outputs"] for c in cells)
        rendered = sum(c["widget_views"] for c in cells)
        # A view of saved state has no kernel-side model: ipywidgets marks it with a broken-link icon, which
        # the screenshots leave out (they show the notebook as a learner sees it after running it).
        page.evaluate(HIDE_DISCONNECTED_JS)
        shots = _screenshot(page, stem)
        print(
            f"{name}: {len(cells)} code cells, {sum(c['outputs'] for c in cells)} outputs, {rendered} widget views "
            f"({expected} displayed, {rerendered} rendered again after a 'model not found'), "
            f"{sum(c['images'] for c in cells)} figures; screenshots {shots}; "
            f"open + kernel start {t_open:.1f} s, in all {time.monotonic() - t0:.1f} s"
        )
        assert not [e for e in console if "widget" in e.lower()], f"{name}: page errors: {console}"
    finally:
        try:
            page.evaluate(CLOSE_JS)
        finally:
            _shutdown_kernels(base, token, wait=False)


def test_run_button_runs_ranks_through_a_live_kernel(lab, lab_page):
    """The one live run: a two-cell notebook (setup, the all-reduce widget) runs in JupyterLab; projection mode
    reaches the kernel, the widget renders, and its Run button starts real ranks and draws their figure."""
    base, token, _ = lab
    page, console = lab_page
    console.clear()
    name = os.path.basename(LIVE)
    t0 = time.monotonic()
    try:
        page.evaluate("() => { const s = document.getElementById('mgpu-hide-disconnected'); if (s) s.remove(); }")
        _open(page, LIVE)
        state = _run_all(page, name)
        assert state["unrun"] == 0, f"{name}: Run All stopped early, {state['unrun']} code cells never ran"
        page.evaluate(PRESENT_JS)
        cells = page.evaluate(REPORT_JS)
        _check_rendered(name, cells)
        assert sum(c["widget_views"] for c in cells) >= 1, f"{name}: the widget did not render: {cells}"
        clicked = _click_run_buttons(page, name)
        assert clicked >= 1, f"{name}: no Run button found"
        shots = _screenshot(page, "live-run-button")
        # Projection mode reached the kernel: the classroom server's setup() injected the widget CSS.
        assert page.locator(".jp-Notebook style#mgpu-projection").count() >= 1, f"{name}: projection CSS missing"
        assert not [e for e in console if "widget" in e.lower()], f"{name}: page errors: {console}"
        print(
            f"{name}: run all {state['run_s']:.1f} s, {clicked} Run button(s) clicked, screenshots {shots}, "
            f"in all {time.monotonic() - t0:.1f} s"
        )
    finally:
        try:
            page.evaluate(CLOSE_JS)
        finally:
            _shutdown_kernels(base, token, wait=False)


def test_rise_presents_a_notebook_as_a_slideshow_in_jupyterlab(lab):
    """RISE (jupyterlab-rise) opens a notebook as reveal.js slides from the same server, offline."""
    base, token, context = lab
    name = os.path.basename(NOTEBOOKS[0])
    page = context.new_page()
    requested = []
    page.on(
        "request",
        lambda r: requested.append(r.url) if not r.url.startswith(base) and r.url.startswith("http") else None,
    )
    try:
        page.goto(f"{base}/rise/notebooks/{name}?token={token}", wait_until="domcontentloaded")
        page.wait_for_selector(".reveal .slides section", timeout=300_000)
        page.wait_for_timeout(1500)
        sections = page.locator(".reveal .slides section").count()
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, "rise-" + name.replace(".ipynb", ".png")))
        assert sections > 1, f"RISE showed {sections} slides"
        assert not requested, f"RISE asked the network for {requested}"
    finally:
        try:
            _shutdown_kernels(base, token)
        finally:
            page.close()
