"""Static export of the whole course: HTML pages that read without a kernel or a network, plus slides.

    python -m mgpu_helpers.tools.export [--out build/site] [--execute] [--slides] [notebooks ...]

A widget has no kernel behind it in a static page: each is replaced by what it showed, so no widget JavaScript is
fetched from a CDN. A review question's answer comes from the package's data, folded until the reader opens it.
reveal.js, MathJax, require.js and jQuery are served from ``OUT/vendor/`` (fetched once with ``npm pack`` into
``build/vendor/``, never committed), so pages and slides work offline.
"""

import argparse
import copy
import glob
import html
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat

from mgpu_helpers.tools.nbtools import execute, markdown_lines, source
from mgpu_helpers.widgets import quiz

# Pinned front-end packages (npm), unpacked into the vendor folder. nbconvert's reveal template is written
# for reveal.js 4; its MathJax configuration for MathJax 2.
VENDOR_PACKAGES = {"reveal.js": "4.6.0", "mathjax": "2.7.9", "requirejs": "2.3.7", "jquery": "2.2.4"}
# What is unpacked where not all: of MathJax what the TeX-AMS_CHTML-full configuration loads (the whole is 73 MB).
VENDOR_KEEP = {
    "jquery": ("dist/jquery.min.js",),
    "mathjax": ("MathJax.js", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions", "jax/input/TeX")
    + ("jax/output/CommonHTML", "jax/element", "fonts/HTML-CSS/TeX/woff", "localization/en"),
}
MATHJAX_CONFIG = "mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
# nbconvert's templates import Mermaid from a CDN (the reveal template always does); the course draws no
# Mermaid diagrams, so the pages import this local stand-in instead.
MERMAID_STUB = "mermaid-none.mjs"
MERMAID_STUB_JS = (
    "// The course has no Mermaid diagrams: a stand-in so that no page fetches Mermaid from a CDN.\n"
    "export default { initialize() {}, run() {}, registerLayoutLoaders() {} };\n"
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def title_of(nb, fallback: str = "") -> str:
    """The notebook's first Markdown heading, without markup."""
    for line in markdown_lines(nb):
        if m := re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line):
            text = re.sub(r"[*_`]", "", m.group(1))
            return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip()
    return fallback


def _unpack(tgz: str, dest: str, keep=None) -> None:
    """The files below the package's top folder (only ``keep``'s paths, where given)."""
    wanted = lambda rel: rel and (not keep or any(rel == k or rel.startswith(k + "/") for k in keep))
    with tarfile.open(tgz) as tar:
        members = []
        for m in tar.getmembers():
            m.name = m.name.split("/", 1)[1] if "/" in m.name else ""
            members += [m] if wanted(m.name) and (m.isfile() or m.isdir()) else []
        tar.extractall(dest, members=members, filter="data")


def ensure_vendor(where: str | None = None) -> str:
    """The folder of the front-end packages, fetched with ``npm pack`` when missing (RuntimeError without npm)."""
    where = where or os.environ.get("MGPU_VENDOR_DIR", os.path.join(os.getcwd(), "build", "vendor"))
    have = lambda name, ver: os.path.exists(os.path.join(where, name, ".version-" + ver))
    if not (missing := {name: ver for name, ver in VENDOR_PACKAGES.items() if not have(name, ver)}):
        return where
    if shutil.which("npm") is None:
        how = "installed to fetch them (apt-get install npm, or set MGPU_VENDOR_DIR)"
        raise RuntimeError(f"the offline copies of {', '.join(missing)} are not in {where} and npm is not {how}")
    os.makedirs(where, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        specs = [f"{n}@{v}" for n, v in missing.items()]
        subprocess.run(["npm", "pack", "--silent", *specs], cwd=tmp, check=True, capture_output=True, timeout=600)
        for name, ver in missing.items():
            dest = os.path.join(where, name)
            shutil.rmtree(dest, ignore_errors=True)
            _unpack(os.path.join(tmp, f"{name}-{ver}.tgz"), dest, VENDOR_KEEP.get(name))
            # reveal.js's themes @import Google web fonts; offline the browser falls back to local fonts anyway.
            for css in Path(dest, "dist", "theme").glob("*.css") if name == "reveal.js" else []:
                text = css.read_text(encoding="utf-8")
                css.write_text(re.sub(r"@import url\((['\"]?)https?://[^)]*\1\);?", "", text), encoding="utf-8")
            Path(dest, ".version-" + ver).touch()
    return where


def copy_vendor(out: str, where: str | None = None) -> str:
    """Copy the vendored front-end files into ``out/vendor``, which the pages link to."""
    src = ensure_vendor(where)
    dest = os.path.join(out, "vendor")
    for name in VENDOR_PACKAGES:
        shutil.copytree(os.path.join(src, name), os.path.join(dest, name), dirs_exist_ok=True)
    Path(dest, MERMAID_STUB).write_text(MERMAID_STUB_JS)
    return dest


def _ref(value):
    return value[len("IPY_MODEL_") :] if isinstance(value, str) and value.startswith("IPY_MODEL_") else None


def _display(html_text: str, text: str | None = None) -> dict:
    data = {"text/html": html_text} | ({} if text is None else {"text/plain": text})
    return {"output_type": "display_data", "metadata": {}, "data": data}


def _walk(model_id: str, state: dict, controls: list, outputs: list, seen: set) -> None:
    """Collect, depth first, the controls (as text) and the outputs of one widget tree."""
    if model_id in seen or model_id not in state:
        return
    seen.add(model_id)
    name, s = state[model_id].get("model_name", ""), state[model_id].get("state", {})
    if name == "OutputModel":
        outputs.extend(s.get("outputs", []))
    elif name in ("HTMLModel", "HTMLMathModel", "LabelModel"):
        if s.get("value"):
            outputs.append(_display(s["value"] if name != "LabelModel" else html.escape(s["value"])))
    elif "value" in s or "description" in s:
        label = s.get("description") or name.replace("Model", "")
        labels, value = s.get("_options_labels") or [], s.get("value")
        index = value if "options" in s and isinstance(value, int) else s.get("index")  # a choice: show its label
        value = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else value
        controls.append(f"{label} = {value}" if value not in (None, "") else label)
    for child in s.get("children", []):
        _walk(_ref(child), state, controls, outputs, seen)


PROGRESS_MODELS = ("FloatProgressModel", "IntProgressModel")


def progress_line(model_id: str, state: dict) -> str | None:
    """tqdm's progress bar widget as the line a terminal shows (``sizes: 100%|##########| 3/3 [...]``), or None:
    ``tqdm.auto`` displays an HBox of [HTML description, FloatProgress, HTML counts]."""
    model = state.get(model_id, {})
    kids = [state.get(_ref(c) or "", {}) for c in model.get("state", {}).get("children", [])]
    bars = [k for k in kids if k.get("model_name") in PROGRESS_MODELS]
    if len(bars) != 1 or any(k.get("model_name") not in PROGRESS_MODELS + ("HTMLModel", "LabelModel") for k in kids):
        return None
    b = bars[0]["state"]
    lo, hi, value = b.get("min", 0), b.get("max", 100), b.get("value", 0)
    frac = (value - lo) / (hi - lo) if hi > lo else 0.0
    filled = max(0, min(10, int(round(10 * frac))))
    drawn = f"|{'#' * filled}{' ' * (10 - filled)}|"
    # tqdm: "desc: 100%" left of the bar, "3/3 [time, rate]" right of it, as HTML (entities, tqdm's spaces undone)
    texts = [re.sub(r"<[^>]+>", "", str(k.get("state", {}).get("value", ""))) for k in kids]
    texts = [html.unescape(t).replace("\u2007", " ").replace("\xa0", " ").strip() for t in texts]
    at = kids.index(bars[0])
    left, right = (" ".join(t for t in part if t) for part in (texts[:at], texts[at + 1 :]))
    return (left + drawn + (" " + right if right else "")).strip()


def flatten_widgets(nb):
    """A copy of ``nb`` with every widget replaced by what it showed, and the widget state dropped."""
    nb = copy.deepcopy(nb)
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        new = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            line = progress_line(view.get("model_id", ""), state) if view else None
            if not view:
                new.append(out)
            elif line is not None:  # a progress bar: its last state as text, like the terminal's
                new.append(_display(f"<pre class='mgpu-progress'>{html.escape(line)}</pre>", line))
            else:
                controls, inner = [], []
                _walk(view.get("model_id", ""), state, controls, inner, set())
                note = "interactive widget (needs a running kernel)"
                note += (": " + "; ".join(html.escape(str(c)) for c in controls)) if controls else ""
                new += [_display(f"<div class='mgpu-widget-static'><em>{note}</em></div>", note), *inner]
        if "outputs" in cell:
            cell["outputs"] = new
    nb.get("metadata", {}).pop("widgets", None)
    return nbformat.from_dict(nb)


def fold_quiz_answers(nb):
    """A copy of ``nb`` in which each ``quiz.ask`` cell shows its questions, hint and answer folded."""
    nb = copy.deepcopy(nb)
    for cell in (c for c in nb.get("cells", []) if c.get("cell_type") == "code"):
        if asked := [(quiz.get(i), quiz.number_of(i)) for i in quiz.asked_ids(source(cell))]:
            cell["outputs"] = [_display(quiz.static_html(q, n), quiz.static_text(q, n)) for q, n in asked]
    return nbformat.from_dict(nb)


def _export(exporter_class, nb, vendor_rel: str, mermaid_url: str, **options) -> str:
    """``nb`` through nbconvert with images embedded and every script served from ``vendor_rel``."""
    options |= dict(mathjax_url=f"{vendor_rel}/{MATHJAX_CONFIG}", require_js_url=f"{vendor_rel}/requirejs/require.js")
    exporter = exporter_class(embed_images=True, mermaid_js_url=mermaid_url, mermaid_layout_elk_js_url="", **options)
    return exporter.from_notebook_node(flatten_widgets(fold_quiz_answers(nb)))[0]


def to_html(nb, vendor_rel: str = "vendor") -> str:
    from nbconvert import HTMLExporter

    return _export(HTMLExporter, nb, vendor_rel, f"./{vendor_rel}/{MERMAID_STUB}", template_name="lab")


def to_slides(nb, vendor_rel: str = "../vendor") -> str:
    from nbconvert import SlidesExporter

    reveal = dict(reveal_scroll=True, reveal_transition="none", reveal_theme="white", reveal_width="1280")
    reveal |= dict(reveal_height="720", reveal_url_prefix=f"{vendor_rel}/reveal.js", font_awesome_url="")
    jquery = f"{vendor_rel}/jquery/dist/jquery.min.js"
    return _export(SlidesExporter, nb, vendor_rel, f"{vendor_rel}/{MERMAID_STUB}", jquery_url=jquery, **reveal)


def _index(entries, slides: bool) -> str:
    extra = lambda stem: f" · <a href='slides/{stem}.slides.html'>slides</a>" if slides else ""
    items = [f"<li><a href='{html.escape(p)}'>{html.escape(t)}</a>{extra(s)}</li>" for p, t, s in entries]
    return (
        "<!DOCTYPE html>\n<html lang='zh-CN'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>mgpu-course · 单机多卡编程</title>"
        "<style>body{font-family:sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;line-height:1.6}"
        "li{margin:.4rem 0}</style></head><body>"
        "<h1>mgpu-course · 单机多卡编程</h1><p>按顺序学习：</p><ol>\n" + "\n".join(items) + "\n</ol></body></html>\n"
    )


def build_site(out, notebooks=None, run=False, slides=False, timeout=600, log=print) -> list[tuple[str, str, str]]:
    """Export ``notebooks`` (default: the course) into ``out``; ``[(page, title, stem)]`` in course order."""
    notebooks = list(notebooks) if notebooks is not None else sorted(glob.glob(os.path.join("notebooks", "*.ipynb")))
    if not notebooks:
        raise FileNotFoundError("no notebooks to export (notebooks/*.ipynb matched nothing)")
    os.makedirs(out, exist_ok=True)
    copy_vendor(out)
    if slides:
        os.makedirs(os.path.join(out, "slides"), exist_ok=True)
    entries = []
    for path in sorted(notebooks, key=os.path.basename):
        stem = os.path.splitext(os.path.basename(path))[0]
        nb = execute(path, timeout) if run else nbformat.read(path, as_version=4)
        page = f"{stem}.html"
        Path(out, page).write_text(to_html(nb), encoding="utf-8")
        if slides:
            Path(out, "slides", f"{stem}.slides.html").write_text(to_slides(nb), encoding="utf-8")
        entries.append((page, title_of(nb, stem), stem))
        log(f"exported {path} -> {os.path.join(out, page)}")
    Path(out, "index.html").write_text(_index(entries, slides), encoding="utf-8")
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mgpu_helpers.tools.export", description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", help="notebooks to export (default: notebooks/*.ipynb)")
    p.add_argument("--out", default=os.path.join("build", "site"), help="output folder (default build/site)")
    p.add_argument("--execute", action="store_true", help="run each notebook first, so every output is there")
    p.add_argument("--slides", action="store_true", help="also write reveal.js slides to OUT/slides/")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell with --execute")
    a = p.parse_args(argv)
    try:
        build_site(a.out, a.notebooks or None, run=a.execute, slides=a.slides, timeout=a.timeout)
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 1
    print(f"open {os.path.join(a.out, 'index.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
