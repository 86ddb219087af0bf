"""keep_executed: nbval's run of a notebook is kept, with its outputs and widget state.

One small notebook (a print, a slider, an Output widget printing inside, an error in a cell tagged
``raises-exception``) runs under nbval in a subprocess, as ``make test-main`` runs the course's notebooks; the
notebook it leaves in ``--executed-dir`` is then read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keep_executed as executed
import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CELLS = [
    ("print('hello'); print('again')", []),
    ("import ipywidgets as w\nslider = w.IntSlider(value=3, description='n')\nslider", []),
    ("out = w.Output()\nwith out:\n    print('inside the widget')\nslider.value = 5\nw.VBox([out])", []),
    ("x = 1  # no output", []),
    ("raise ValueError('on purpose')", ["raises-exception"]),
]


def _notebook(folder, cells=CELLS, name="tiny.ipynb"):
    nb = nbformat.v4.new_notebook()
    for src, tags in cells:
        cell = nbformat.v4.new_code_cell(src)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# tiny"))
    folder.mkdir(exist_ok=True)
    path = folder / name
    nbformat.write(nb, str(path))
    return path


def _nbval(path, out_dir, *extra):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(path),
        "--nbval-lax",
        "--nbval-current-env",
        "-p",
        "no:randomly",
        "-q",
        "-c",
        os.path.join(ROOT, "pyproject.toml"),
        f"--executed-dir={out_dir}",
        *extra,
    ]
    return subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))),
    )


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("executed")
    source = _notebook(tmp / "nbs")
    elsewhere = _notebook(tmp / "elsewhere", [("print(1)", [])], name="other.ipynb")
    run = _nbval(source, tmp / "out", elsewhere, f"--executed-from={tmp / 'nbs'}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    path = tmp / "out" / "tiny.ipynb"
    assert path.exists(), f"nothing kept in {tmp / 'out'}:\n{run.stdout[-2000:]}"
    return source, path, nbformat.read(str(path), as_version=4)


def test_only_notebooks_of_the_kept_folders_are_written(kept):
    _, path, _ = kept
    assert sorted(os.listdir(path.parent)) == ["tiny.ipynb"]


def test_every_code_cell_keeps_its_outputs_in_the_order_it_ran(kept):
    _, _, nb = kept
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3, 4, 5]
    assert [(o.output_type, o.get("name"), o.get("text")) for o in code[0].outputs] == [
        ("stream", "stdout", "hello\nagain\n")
    ]
    assert code[3].outputs == []
    assert [(o.output_type, o.ename, o.evalue) for o in code[4].outputs] == [("error", "ValueError", "on purpose")]
    assert nb.cells[0].cell_type == "markdown"
    nbformat.validate(nb)


def test_widget_state_is_stored_as_jupyterlab_loads_it(kept):
    _, _, nb = kept
    code = [c for c in nb.cells if c.cell_type == "code"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]
    assert state["version_major"] == 2
    models = state["state"]
    for cell in code[1:3]:
        (out,) = cell.outputs
        assert out.output_type == "execute_result"
        assert out.data[WIDGET_VIEW]["model_id"] in models
    slider = models[code[1].outputs[0].data[WIDGET_VIEW]["model_id"]]
    assert slider["model_name"] == "IntSliderModel" and slider["state"]["value"] == 5  # the update, not the start
    box = models[code[2].outputs[0].data[WIDGET_VIEW]["model_id"]]
    (child,) = [models[ref.removeprefix("IPY_MODEL_")] for ref in box["state"]["children"]]
    # What the cell printed inside the Output widget is in the widget, as in JupyterLab, not in the cell.
    assert child["model_name"] == "OutputModel"
    assert child["state"]["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "inside the widget\n"}]
    for ref in [r for m in models.values() for r in json.dumps(m["state"]).split('"') if r.startswith("IPY_MODEL_")]:
        assert ref.removeprefix("IPY_MODEL_") in models, f"{ref} is referenced but not stored"


def test_the_run_is_marked_with_its_source_and_result(kept):
    source, path, nb = kept
    meta = nb.metadata[executed.META_KEY]
    assert meta["complete"] and meta["failed_cells"] == meta["skipped_cells"] == []
    assert meta["code_cells"] == meta["cells_run"] == 5
    assert executed.status(str(path), str(source)) == "ok"
    assert executed.status(str(path) + ".none", str(source)) == "missing"
    with open(source, "a") as f:  # the source changed since: the kept run is stale
        f.write("\n")
    assert executed.status(str(path), str(source)) == "stale"


def test_failing_and_skipped_cells_are_recorded_and_nbval_still_fails(tmp_path):
    source = _notebook(
        tmp_path / "nbs", [("print(1)", []), ("1 / 0", []), ("print(3)", []), ("print(4)", ["nbval-skip"])]
    )
    run = _nbval(source, tmp_path / "out", f"--executed-from={tmp_path / 'nbs'}")
    assert run.returncode == 1 and "1 failed, 2 passed, 1 skipped" in run.stdout, run.stdout[-2000:]
    nb = nbformat.read(str(tmp_path / "out" / "tiny.ipynb"), as_version=4)
    meta = nb.metadata[executed.META_KEY]
    assert meta["failed_cells"] == [1] and meta["skipped_cells"] == [3] and meta["complete"]
    assert nb.cells[4].execution_count is None and nb.cells[4].outputs == []
    assert executed.status(str(tmp_path / "out" / "tiny.ipynb"), str(source)) == "failed"
    assert nb.cells[3].outputs[0].text == "3\n"
