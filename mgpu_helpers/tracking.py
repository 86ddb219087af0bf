"""The learner's progress: passing checks and written predictions each append a JSON line to :func:`record_file`,
under the notebook the kernel runs (a test or a console records nothing); :func:`table` reads them back beside what
each notebook asks for, read from the notebook itself, so that no notebook has to run again."""

import contextlib
import importlib
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the course's checkout
FOLDERS = ("notebooks", "exercises")
CHECK_CALL = re.compile(r"\bmh\.checks\.(?:(\w+)\.)?((?:try|check)_\w+)\s*\(")
PREDICTION = re.compile(r"^(\w+) = None  # 你的", re.M)


def workspace_dir() -> Path:
    """The learner's own copy of the notebooks: ``$MGPU_WORKSPACE``, else ``workspace/`` in the checkout."""
    return Path(os.environ.get("MGPU_WORKSPACE") or ROOT / "workspace")


def record_file() -> Path:
    return Path(os.environ.get("MGPU_PROGRESS_FILE") or workspace_dir() / "progress.jsonl")


def record(kind: str, item: str) -> None:
    """Note that ``item`` (a checker's name, a prediction's label) of this notebook passed or was written."""
    notebook = Path(os.environ.get("JPY_SESSION_NAME", "")).stem  # "" outside a Jupyter notebook
    if not notebook:
        return
    entry = {"notebook": notebook, "kind": kind, "item": item, "time": round(time.time())}
    # OSError: a read-only place; progress is a convenience, never a reason to stop a notebook
    with contextlib.suppress(OSError):
        path = record_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")


def checker_name() -> str:
    """The name of the checker running now: the nearest caller named ``check_...`` (or ``_check_...``)."""
    for frame, _line in traceback.walk_stack(sys._getframe(1)):
        if frame.f_code.co_name.lstrip("_").startswith("check_"):
            return frame.f_code.co_name
    return ""


def forget(notebook: str) -> None:
    """Drop every record of ``notebook`` (its copy was reset to the course's)."""
    path = record_file()
    if path.exists():
        lines = path.read_text(encoding="utf-8").splitlines()
        kept = [ln for ln in lines if ln.strip() and json.loads(ln).get("notebook") != notebook]
        path.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")


def records() -> dict:
    """``{notebook: {"check": set of checker names, "prediction": set of labels}}`` from the record file."""
    out: dict = {}
    path = record_file()
    for ln in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            r = json.loads(ln)
        except ValueError:
            continue
        out.setdefault(r["notebook"], {"check": set(), "prediction": set()})[r["kind"]].add(r["item"])
    return out


def asks(path) -> dict:
    """What the notebook at ``path`` asks for: ``{"check": [checker names], "prediction": [variable names]}``."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    checks = []
    for module, name in CHECK_CALL.findall(code):
        try:
            fn = getattr(importlib.import_module("mgpu_helpers.checks" + (f".{module}" if module else "")), name)
        except (ImportError, AttributeError):
            continue
        checks.append(getattr(fn, "checker", name))  # a lesson's try_x names the checker it runs
    return {"check": list(dict.fromkeys(checks)), "prediction": PREDICTION.findall(code)}  # each once, in order


def table(folder=None) -> list[dict]:
    """Per notebook of ``folder`` (default the workspace): checks passed and left, predictions written."""
    base = Path(folder) if folder else workspace_dir()
    if not any((base / f).is_dir() for f in FOLDERS):
        base = ROOT
    done = records()
    rows = []
    for sub in FOLDERS:
        for path in sorted((base / sub).glob("*.ipynb")):
            if ".course-update" in path.name:
                continue
            want, got = asks(path), done.get(path.stem, {"check": set(), "prediction": set()})
            passed = [c for c in want["check"] if c in got["check"]]
            left = [c for c in want["check"] if c not in got["check"]]
            asked = len(want["prediction"])
            row = {"notebook": path.stem, "passed": passed, "left": left}
            rows.append(row | {"predictions": (min(len(got["prediction"]), asked), asked)})
    return rows


def progress(folder=None) -> list[dict]:
    """Print the progress table (``mh.progress()``) and return its rows."""
    from mgpu_helpers.report.tables import format_table

    rows = [r for r in table(folder) if r["passed"] or r["left"] or r["predictions"][1]]
    lines = []
    for r in rows:
        left = "、".join(c.lstrip("_").removeprefix("check_") for c in r["left"]) or "全部通过"
        checks = f"{len(r['passed'])} / {len(r['passed']) + len(r['left'])}"
        predictions = "{} / {}".format(*r["predictions"])
        lines.append(dict(notebook=r["notebook"], checks=checks, predictions=predictions, left=left))
    heads = {"notebook": "笔记本", "checks": "检查通过", "predictions": "预测写了", "left": "还没通过的检查"}
    columns = [(key, head, "{}") for key, head in heads.items()]
    print(format_table(lines, columns, left=("left",), title=f"学习进度（记录在 {record_file()}）"))
    return rows
