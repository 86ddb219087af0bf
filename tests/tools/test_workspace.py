"""The learner's workspace never loses their work, shows their progress, and opens without being modified."""

import json
import subprocess

import nbformat
import pytest

import mgpu_helpers as mh
from mgpu_helpers import tracking
from mgpu_helpers.tools import workspace


def _notebook(*sources) -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    return nbformat.writes(nb) + "\n"


def _git(course, *args) -> str:
    return subprocess.run(["git", "-C", str(course), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def course(tmp_path):
    """A course checkout (a git repository) with four lessons and an exercise."""
    root = tmp_path / "course"
    for rel in (
        "notebooks/01_a.ipynb",
        "notebooks/02_b.ipynb",
        "notebooks/03_c.ipynb",
        "notebooks/04_d.ipynb",
        "exercises/ex01_a.ipynb",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_notebook(f"print('{rel.split('/')[1][:-6]} v1')"), encoding="utf-8")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1")
    return root


def _source(path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)


def test_an_update_keeps_every_edit_puts_new_versions_beside_and_adds_new_notebooks(course, tmp_path):
    ws = tmp_path / "ws"
    assert len(workspace.update(ws, course)) == 5 and (ws / "exercises/ex01_a.ipynb").exists()
    for name in ("01_a", "02_b"):  # the learner answers in two notebooks
        path = ws / "notebooks" / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(f"my_answer = '{name}'"))
        nbformat.write(nb, path)
    for name in ("01_a", "02_b", "03_c"):  # the course changes three, two of them those
        (course / "notebooks" / f"{name}.ipynb").write_text(_notebook(f"print('{name} v2')"), encoding="utf-8")
    (course / "notebooks/05_e.ipynb").write_text(_notebook("print('new')"), encoding="utf-8")  # and gains one
    _git(course, "add", "-A")
    _git(course, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v2")

    said = workspace.update(ws, course)
    for name in ("01_a", "02_b"):
        assert f"my_answer = '{name}'" in _source(ws / "notebooks" / f"{name}.ipynb")  # the edit is intact
        assert f"{name} v2" in _source(ws / "notebooks" / f"{name}{workspace.UPDATE_SUFFIX}")
    assert "03_c v2" in _source(ws / "notebooks/03_c.ipynb")  # not edited: simply updated
    assert "04_d v1" in _source(ws / "notebooks/04_d.ipynb") and (ws / "notebooks/05_e.ipynb").exists()
    assert len(said) == 4 and sum("旁边" in s for s in said) == 2, said
    assert workspace.update(ws, course) == []  # a second update has nothing to do
    assert _git(course, "status", "--porcelain") == ""  # the course's checkout is untouched


def test_a_deleted_notebook_comes_back_and_reset_keeps_the_learners_version(course, tmp_path, monkeypatch):
    monkeypatch.setenv("MGPU_PROGRESS_FILE", str(tmp_path / "progress.jsonl"))
    ws = tmp_path / "ws"
    workspace.update(ws, course)
    (ws / "notebooks/04_d.ipynb").unlink()
    assert any("重新放回" in s for s in workspace.update(ws, course))
    path = ws / "notebooks/02_b.ipynb"
    path.write_text(_notebook("mine = 1"), encoding="utf-8")
    workspace.reset("02_b", ws, course)
    assert "v1" in _source(path) and "mine = 1" in _source(ws / "notebooks/02_b.before-reset.ipynb")
    with pytest.raises(SystemExit, match="没有叫"):
        workspace.reset("99_nothing", ws, course)


def test_a_delivered_notebook_carries_this_kernels_language_info(course, tmp_path):
    """JupyterLab writes the kernel's language_info into a notebook when the kernel starts; when it is the same
    value already, the notebook is not marked modified (measured in JupyterLab 4: a differing ``version`` alone
    marked it modified)."""
    ws = tmp_path / "ws"
    workspace.update(ws, course)
    info = json.loads((ws / "notebooks/01_a.ipynb").read_text(encoding="utf-8"))["metadata"]["language_info"]
    import platform

    assert info["name"] == "python" and info["version"] == platform.python_version() and info["mimetype"]


def _lesson(folder, name, *sources):
    (folder / "notebooks").mkdir(parents=True, exist_ok=True)
    (folder / "notebooks" / f"{name}.ipynb").write_text(_notebook(*sources), encoding="utf-8")


def test_progress_comes_from_the_checks_as_they_pass_and_a_reset_clears_the_row(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MGPU_PROGRESS_FILE", str(tmp_path / "progress.jsonl"))
    ws = tmp_path / "ws"
    _lesson(
        ws,
        "06_x",
        "my_dp_gb = None  # 你的预测：每张卡多少 GB",
        "contiguous_ranges = mh.checks.sharding.try_contiguous_ranges(contiguous_ranges)",
        "per_rank_memory = mh.checks.sharding.try_per_rank_memory(per_rank_memory)",
    )

    def own_ranges(n, ws_):
        bounds = [0]
        for r in range(ws_):
            bounds.append(bounds[-1] + n // ws_ + (r < n % ws_))
        return [range(a, b) for a, b in zip(bounds, bounds[1:])]

    mh.checks.sharding.try_contiguous_ranges(own_ranges)  # outside a notebook: nothing is recorded
    assert not (tmp_path / "progress.jsonl").exists()
    monkeypatch.setenv("JPY_SESSION_NAME", str(ws / "notebooks" / "06_x.ipynb"))
    mh.checks.sharding.try_contiguous_ranges(own_ranges)
    mh.widgets.predict.compare("Data Parallel 每张卡", 26.0, 24.0, "GB")
    [row] = tracking.table(ws)
    assert row["passed"] == ["check_contiguous_ranges"] and row["left"] == ["check_per_rank_memory"]
    assert row["predictions"] == (1, 1)
    capsys.readouterr()
    mh.progress(ws)
    out = capsys.readouterr().out
    assert "06_x" in out and "1 / 2" in out and "per_rank_memory" in out
    tracking.forget("06_x")
    [row] = tracking.table(ws)
    assert row["passed"] == [] and row["predictions"] == (0, 1)


def test_the_course_asks_for_its_checks_and_predictions_in_every_notebook():
    rows = {r["notebook"]: r for r in tracking.table(tracking.ROOT)}
    assert len(rows["05_collectives"]["left"]) >= 2 and rows["05_collectives"]["predictions"][1] >= 1
    assert len(rows["ex04_point_to_point"]["left"]) >= 2


def test_make_clean_says_what_it_deletes_and_keeps_the_workspace():
    out = subprocess.run(["make", "-n", "clean"], cwd=tracking.ROOT, capture_output=True, text=True).stdout
    assert "rm -rf .venv" in out and "workspace" in out and "build/mine" in out
    assert not any(
        word in line for line in out.splitlines() if line.startswith("rm") for word in ("workspace", "build")
    )
