"""Static export: the course as HTML that reads without a kernel or a network, with an index in course order."""

from __future__ import annotations

import os
import re

import nbformat
import pytest

from mgpu_helpers.tools import export

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nb(*cells):
    return nbformat.v4.new_notebook(
        cells=list(cells),
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def test_title_is_the_first_heading_without_markup():
    nb = _nb(
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("intro\n\n## 02 · **CuPy** `RawKernel` 与 [占用率](x.md)\nmore"),
    )
    assert export.title_of(nb) == "02 · CuPy RawKernel 与 占用率"
    assert export.title_of(_nb(), "fallback") == "fallback"


def test_flatten_replaces_a_widget_by_its_figures_text_and_control_values():
    img = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
    }
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_s", "IPY_MODEL_h", "IPY_MODEL_o"]}},
        "s": {"model_name": "IntSliderModel", "state": {"description": "GPUs", "value": 4}},
        "h": {"model_name": "HTMLModel", "state": {"value": "<b>replicate</b>"}},
        "o": {"model_name": "OutputModel", "state": {"outputs": [img]}},
    }
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                export.WIDGET_VIEW: {"model_id": "box", "version_major": 2, "version_minor": 0},
                "text/plain": "VBox()",
            },
        )
    ]
    nb = _nb(cell)
    nb.metadata["widgets"] = {export.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    flat = export.flatten_widgets(nb)
    outs = flat.cells[0].outputs
    assert "GPUs = 4" in outs[0].data["text/html"]
    assert outs[1].data["text/html"] == "<b>replicate</b>" and outs[2].data["image/png"] == "iVBORw0KGgo="
    assert "widgets" not in flat.metadata  # no widget JavaScript to fetch


def test_export_writes_an_index_in_course_order_and_a_widgets_static_figure(vendor, tmp_path, monkeypatch):
    monkeypatch.setenv("MGPU_VENDOR_DIR", vendor)
    monkeypatch.setenv("MGPU_FORCE_CPU", "1")
    src = tmp_path / "notebooks"
    src.mkdir()
    # Two small notebooks, written out of order: the index must follow the NN_ prefix.
    widget = _nb(
        nbformat.v4.new_markdown_cell("# 02 · 切分与显存"),
        nbformat.v4.new_code_cell(
            "from mgpu_helpers.widgets import sharding\nsharding.show_sharding(params=24, world_size=4, capacity=16)"
        ),
        nbformat.v4.new_markdown_cell("公式 $a = b$"),
    )
    first = _nb(nbformat.v4.new_markdown_cell("# 01 · 开始之前"), nbformat.v4.new_code_cell("print(6 * 7)"))
    nbformat.write(widget, str(src / "02_widget.ipynb"))
    nbformat.write(first, str(src / "01_first.ipynb"))
    out = tmp_path / "site"
    entries = export.build_site(
        str(out),
        [str(src / "02_widget.ipynb"), str(src / "01_first.ipynb")],
        run=True,
        slides=True,
        timeout=60,  # both cells take well under a second: a stalled kernel fails here instead of hanging the suite
        log=lambda *_: None,
    )
    assert [e[:2] for e in entries] == [("01_first.html", "01 · 开始之前"), ("02_widget.html", "02 · 切分与显存")]
    index = (out / "index.html").read_text(encoding="utf-8")
    links = re.findall(r"<li><a href='([^']+\.html)'>([^<]+)</a>", index)
    assert links == [("01_first.html", "01 · 开始之前"), ("02_widget.html", "02 · 切分与显存")]
    page = (out / "02_widget.html").read_text(encoding="utf-8")
    # The widget's own figure (drawn into its Output area) is in the page as an embedded image.
    at = page.index("mgpu-widget-static")
    assert re.search(r'<img[^>]+src="data:image/png;base64,', page[at:])
    assert "GPU 数 = 4" in page and "42" in (out / "01_first.html").read_text(encoding="utf-8")
    for html_page in [out / "01_first.html", out / "02_widget.html", out / "slides" / "02_widget.slides.html"]:
        text = html_page.read_text(encoding="utf-8")
        refs = re.findall(r'<script[^>]*\ssrc="([^"]*)"', text) + re.findall(r'<link[^>]*\shref="([^"]*)"', text)
        assert refs and not [r for r in refs if re.match(r"^(https?:)?//", r)], f"{html_page}: {refs}"
        assert "unpkg.com" not in text and "embed-amd" not in text
        for r in refs:
            assert (html_page.parent / r.split("?")[0]).exists(), f"{html_page}: {r} missing"


def test_export_without_notebooks_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="matched nothing"):
        export.build_site(str(tmp_path / "site"), [])


def test_review_questions_show_folded_answers_in_the_static_page():
    from mgpu_helpers.widgets import quiz

    q = quiz.get("review-3")
    widget_out = nbformat.v4.new_output(
        "display_data",
        data={export.WIDGET_VIEW: {"model_id": "m", "version_major": 2, "version_minor": 0}, "text/plain": "VBox()"},
    )
    asked = nbformat.v4.new_code_cell('mh.widgets.quiz.ask("review-3")')
    asked.outputs = [widget_out]  # executed: the widget is replaced
    unrun = nbformat.v4.new_code_cell('mh.widgets.quiz.ask("think-4")')  # not executed: the question appears
    folded = export.fold_quiz_answers(_nb(asked, unrun, nbformat.v4.new_code_cell("print(1)")))
    page = export.to_html(folded)
    first = folded.cells[0].outputs
    assert len(first) == 1 and export.WIDGET_VIEW not in first[0]["data"]
    html_out = first[0]["data"]["text/html"]
    assert "<b>3.</b>" in html_out and q.prompt in html_out
    assert html_out.index("<details>") < html_out.index(quiz.html.escape(q.explanation))  # folded
    assert q.explanation not in first[0]["data"]["text/plain"]
    assert quiz.get("think-4").prompt.split("）")[1][:10] in page and folded.cells[2].outputs == []
    # the page as a whole: every answer sits inside a <details> block
    for explanation in (quiz.html.escape(q.explanation), quiz.html.escape(quiz.get("think-4").explanation)):
        at = page.index(explanation)
        assert page.rfind("<details>", 0, at) > page.rfind("</details>", 0, at)
