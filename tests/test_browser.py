"""The course in a real JupyterLab, driven by a real browser, as a class would use it.

One JupyterLab server (127.0.0.1, a free port, a token, no network) serves a copy of notebooks/ (the server
autosaves, the committed notebooks stay untouched) with projection mode on for its kernels (MGPU_PROJECTION=1).
Headless Chromium (Debian's ``chromium``, driven by Playwright's driver; no browser download) loads JupyterLab
once, at 1280x720, and opens every notebook in it in turn, each exactly once, with a kernel of its own. Each
notebook runs top to bottom once (JupyterLab's ``runmenu:run-all``): its widgets need a live kernel to render,
and nothing is run a second time. The test checks:

- every code cell ran, and error outputs appear only in cells tagged ``raises-exception``;
- every widget the notebook displays is rendered as DOM (ipywidgets views with their controls, not just a
  model), and a "Run" button really runs ranks through the kernel and draws its figure;
- screenshots of each notebook (at its first widget or figure, and at its end) go to build/screenshots/.

What the cells print is nbval's job (``make test-main``); here only what a browser adds is checked.
Slow (every notebook, in CPU mode): marked ``browser`` and run by ``make test-browser`` (CI runs it after
``make test``). Skipped, saying why, when Chromium or Playwright is missing.
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

import pytest

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
SHOTS = os.path.join(ROOT, "build", "screenshots")
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 720}      # a classroom projector
NOTEBOOK_TIMEOUT = float(os.environ.get("MGPU_BROWSER_NOTEBOOK_TIMEOUT", "600"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_browser_test_finds_the_notebooks():
    assert len(NOTEBOOKS) >= 1, "notebooks/*.ipynb matched nothing: the browser test would test nothing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings_dir: str) -> None:
    """JupyterLab user settings for a quiet, deterministic page: no news or update checks (no network), every
    cell attached to the DOM (so widget views can be counted), no autosave."""
    settings = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, value in settings.items():
        path = os.path.join(settings_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(value, f)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``(base_url, token, page_factory)``: a JupyterLab server on a copy of notebooks/ and a browser."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing (pip install -e '.[test]')")
    work = tmp_path_factory.mktemp("lab")
    shutil.copytree(os.path.join(ROOT, "notebooks"), work / "notebooks")
    _write_settings(str(work / "settings"))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
           f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False",
           f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={work / 'settings'}", f"--LabApp.workspaces_dir={work / 'workspaces'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.getuid() == 0:
        cmd.append("--allow-root")
    env = dict(os.environ, MGPU_PROJECTION="1", JUPYTER_RUNTIME_DIR=str(work / "runtime"),
               PYTHONUNBUFFERED="1")
    log = open(work / "jupyterlab.log", "w")
    server = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
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


_ENDING: list[threading.Thread] = []     # kernel shutdowns still under way (joined before the server stops)


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

REPORT_JS = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  return nb.content.widgets.filter(c => c.model.type === 'code').map((c, i) => {
    const outputs = c.model.outputs.toJSON();
    const views = Array.from(c.node.querySelectorAll('.jp-OutputArea-output .jupyter-widgets'))
      .filter(el => !el.parentElement.closest('.jupyter-widgets'));   // top-level views only
    return {
      index: i,
      source: c.model.sharedModel.getSource().slice(0, 120),
      tags: c.model.getMetadata('tags') || [],
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      widget_outputs: outputs.filter(o => o.data && o.data['""" + WIDGET_VIEW + """']).length,
      widget_views: views.length,
      controls: views.map(v => (v.matches('.widget-inline-hbox, .widget-html, .widget-label') ? 1 : 0) +
        v.querySelectorAll('.widget-slider, .widget-button, .widget-dropdown, .widget-radio-box, ' +
          '.widget-checkbox, .widget-text, .widget-html, .widget-label, .widget-progress, .widget-output').length),
      widget_errors: views.filter(v => /Error displaying widget|Error rendering/.test(v.textContent)).length,
      images: c.node.querySelectorAll('.jp-OutputArea-output img').length,
    };
  });
}"""


def _run_all(page, name: str) -> dict:
    page.wait_for_function(
        "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        " return w && w.content && w.sessionContext && w.sessionContext.session &&"
        " w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }",
        timeout=300_000)   # a kernel start on a busy 2-core machine
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
        if quiet >= 3:      # idle, nothing running, run-all resolved: three looks in a row (0.6 s)
            state["run_s"] = time.monotonic() - started
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: still running after {NOTEBOOK_TIMEOUT:.0f} s: {state}")


def _click_run_buttons(page, name: str) -> int:
    """Click each widget's Run button (real ranks through the kernel's comm) and wait for its figure."""
    clicked = 0
    buttons = page.locator(".jp-OutputArea-output .jupyter-widgets button.widget-button",
                           has_text="Run")
    for k in range(buttons.count()):
        button = buttons.nth(k)
        view = button.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][last()]")
        before = view.locator(".widget-output img").count()
        button.scroll_into_view_if_needed()
        button.click()
        try:
            page.wait_for_function(
                "([el, n]) => el.querySelectorAll('.widget-output img').length > n",
                arg=[view.element_handle(), before], timeout=180_000)
        except Exception as exc:   # the widget prints errors into its output: show them
            raise AssertionError(f"{name}: Run button {k} drew no figure: "
                                 f"{view.inner_text()[-600:]}") from exc
        clicked += 1
    return clicked


def _screenshot(page, stem: str) -> list[str]:
    os.makedirs(SHOTS, exist_ok=True)
    paths = []
    target = page.locator(".jp-OutputArea-output .jupyter-widgets.widget-vbox, "
                          ".jp-OutputArea-output .jupyter-widgets.widget-box").first
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
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell && "
                           "window.jupyterapp.commands.hasCommand('docmanager:open')", timeout=300_000)
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

# Close the notebook without JupyterLab's "save your changes?" dialog (the run changed it; the copy is scratch).
CLOSE_JS = """() => {
  for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) { w.dispose(); }
}"""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab_with_widgets_rendered(lab, lab_page, path):
    base, token, _ = lab
    page, console = lab_page
    console.clear()
    name = os.path.basename(path)
    stem = name.rsplit(".", 1)[0]
    t0 = time.monotonic()
    try:
        page.evaluate(OPEN_JS, f"notebooks/{name}")
        state = _run_all(page, name)
        t_run = time.monotonic() - t0
        # What a teacher does before projecting: hide the file browser, JupyterLab's presentation mode.
        page.evaluate("() => { window.jupyterapp.shell.collapseLeft(); window.jupyterapp.shell.collapseRight();"
                      " return window.jupyterapp.commands.execute('application:toggle-presentation-mode'); }")
        cells = page.evaluate(REPORT_JS)
        bad = [f"cell {c['index']} ({c['source'][:60]!r}): {c['errors']}" for c in cells
               if c["errors"] and "raises-exception" not in c["tags"]]
        assert not bad, f"{name}: errors in cells not tagged raises-exception:\n" + "\n".join(bad)
        assert state["unrun"] == 0, f"{name}: Run All stopped early, {state['unrun']} code cells never ran"
        expected = sum(c["widget_outputs"] for c in cells)
        rendered = sum(c["widget_views"] for c in cells)
        for c in cells:
            if c["widget_outputs"]:
                assert c["widget_views"] >= c["widget_outputs"] and not c["widget_errors"], \
                    f"{name}: cell {c['index']} has a widget model but no rendered view: {c}"
                assert all(n > 0 for n in c["controls"]), f"{name}: cell {c['index']}: a widget without controls"
        clicked = _click_run_buttons(page, name) if expected else 0
        shots = _screenshot(page, stem)
        print(f"{name}: {state['cells']} code cells, {rendered} widget views "
              f"({expected} displayed), {clicked} Run buttons clicked, "
              f"{sum(c['images'] for c in cells)} figures; screenshots {shots}; "
              f"open + kernel start {t_run - state['run_s']:.1f} s, run all {state['run_s']:.1f} s, "
              f"in all {time.monotonic() - t0:.1f} s")
        if expected:
            assert rendered > 0
        # Projection mode reached the kernel: the classroom server's setup() injected the widget CSS (into this
        # notebook's outputs: the notebooks opened before it are closed).
        assert page.locator(".jp-Notebook style#mgpu-projection").count() >= 1, f"{name}: projection CSS missing"
        assert not [e for e in console if "widget" in e.lower()], f"{name}: page errors: {console}"
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
    page.on("request", lambda r: requested.append(r.url) if not r.url.startswith(base) and
            r.url.startswith("http") else None)
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
