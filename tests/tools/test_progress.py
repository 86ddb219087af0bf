"""tqdm bars for long loops: in a terminal, through the progress= protocol, and in the static export."""

from __future__ import annotations

import re

import nbformat
import pytest

from mgpu_helpers.report import progress


def test_iterate_yields_every_item_and_the_text_bar_reaches_the_total(capsys):
    assert list(progress.iterate(["a", "b", "c"], "kernels")) == ["a", "b", "c"]
    out = capsys.readouterr().out
    last = out.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("kernels: 100%") and "3/3" in last


def test_callback_accepts_a_description_or_nothing(capsys):
    update, close = progress.callback("sizes")
    for done in range(4):
        update(done, 3)
    close()
    assert "sizes: 100%" in capsys.readouterr().out
    update, close = progress.callback(None)
    assert update(1, 2) is None and close() is None
    with pytest.raises(TypeError, match="progress must be"):
        progress.callback(3)
    with pytest.raises(TypeError, match="progress must be"):
        progress.callback(print)


def test_a_tqdm_bar_in_an_executed_notebook_survives_the_export_as_one_readable_line(tmp_path):
    from mgpu_helpers.tools import export

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from mgpu_helpers.report import progress\n"
            "total = sum(i for i in progress.iterate(range(3), 'sizes'))\n"
            "assert total == 3"
        )
    ]
    path = tmp_path / "bar.ipynb"
    nbformat.write(nb, str(path))
    ran = export.execute(str(path), timeout=60)  # one quick cell: a stalled kernel fails instead of hanging
    flat = export.flatten_widgets(ran)
    texts = [o.get("data", {}).get("text/plain", "") for o in flat.cells[0].outputs]
    lines = [t for t in texts if "sizes" in t]
    assert lines, f"no bar in the exported outputs: {flat.cells[0].outputs}"
    assert re.match(r"sizes: 100%\|#{10}\| 3/3 \[", lines[0]), lines[0]
    page = export.to_html(ran)
    assert "sizes: 100%|##########| 3/3" in page and "interactive widget" not in page


def test_progress_line_is_none_for_other_widgets():
    from mgpu_helpers.tools import export

    state = {
        "a": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_b"]}},
        "b": {"model_name": "ButtonModel", "state": {"description": "Run"}},
    }
    assert export.progress_line("a", state) is None
