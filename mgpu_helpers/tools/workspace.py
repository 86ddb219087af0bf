"""The learner's workspace: their own copy of the notebooks and exercises, which the course never overwrites.

    python -m mgpu_helpers.tools.workspace update      # make it, or bring in what the course added or changed
    python -m mgpu_helpers.tools.workspace reset NAME  # one notebook back to the course's version, progress too
    python -m mgpu_helpers.tools.workspace progress    # the progress table (mh.progress() in a notebook)

The workspace (``$MGPU_WORKSPACE``, else the git-ignored ``workspace/``) is where ``make lab`` opens JupyterLab,
so ``git pull`` never meets the learner's answers. An update treats each notebook as nbgitpuller treats a file:
one the learner has not changed since delivery (its sha256 is in ``.mgpu-workspace.json``) is replaced; one both
sides changed is left, the course's version put beside it as ``NAME.course-update.ipynb``. Delivered notebooks
carry this kernel's ``language_info``, which JupyterLab writes when a kernel starts: opening one marks nothing.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from mgpu_helpers import tracking

MANIFEST = ".mgpu-workspace.json"
UPDATE_SUFFIX = ".course-update.ipynb"


def kernel_language_info() -> dict:
    """This Python's ipykernel ``language_info``, read in a process of its own: importing ipykernel here would make
    every later ``tqdm.auto`` bar a notebook widget."""
    code = "import json; from ipykernel.ipkernel import IPythonKernel as K; print(json.dumps(K.language_info))"
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def delivered_text(path: Path, language_info: dict) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb.setdefault("metadata", {})["language_info"] = language_info
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _manifest(ws: Path) -> dict:
    path = ws / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _deliver(target: Path, text: str, known: dict, rel: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    known[rel] = _sha(text)


def _save_manifest(ws: Path, known: dict) -> None:
    ws.mkdir(parents=True, exist_ok=True)
    (ws / MANIFEST).write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def update(ws=None, course=tracking.ROOT) -> list[str]:
    """Bring the workspace up to the course's notebooks; one line (Chinese) for each it added, updated or offered."""
    ws, course = Path(ws or tracking.workspace_dir()), Path(course)
    known, info, said = _manifest(ws), kernel_language_info(), []
    for folder in tracking.FOLDERS:
        for src in sorted((course / folder).glob("*.ipynb")):
            rel, target = f"{folder}/{src.name}", ws / folder / src.name
            text = delivered_text(src, info)
            mine = target.read_text(encoding="utf-8") if target.exists() else None
            if mine == text:
                known[rel] = _sha(text)
            elif mine is not None and _sha(mine) != known.get(rel):  # the learner's work: never overwritten
                beside = target.with_name(src.stem + UPDATE_SUFFIX)
                offered = beside.read_text(encoding="utf-8") if beside.exists() else None
                if known.get(rel) != _sha(text) and offered != text:
                    beside.write_text(text, encoding="utf-8")
                    kept = f"{rel}：你改过它，课程也更新了它。你的版本原样保留；"
                    said.append(f"{kept}课程的新版本放在旁边：{folder}/{beside.name}")
            else:  # new, deleted, or there as delivered: the course's version goes in
                news = "课程更新了，你没有改过它，已换成新版本" if mine is not None else "你删掉了它，已重新放回"
                said.append(f"{rel}：{news if rel in known else '新加入'}")
                _deliver(target, text, known, rel)
    _save_manifest(ws, known)
    return said


def reset(name: str, ws=None, course=tracking.ROOT) -> str:
    """Put the course's version of notebook ``name`` back and forget its progress; the learner's version is kept
    as ``NAME.before-reset.ipynb``."""
    ws, course, stem = Path(ws or tracking.workspace_dir()), Path(course), Path(name).stem
    for folder in tracking.FOLDERS:
        if (src := course / folder / f"{stem}.ipynb").exists():
            if (target := ws / folder / src.name).exists():
                target.replace(target.with_name(f"{stem}.before-reset.ipynb"))
            known = _manifest(ws)
            _deliver(target, delivered_text(src, kernel_language_info()), known, f"{folder}/{src.name}")
            _save_manifest(ws, known)
            tracking.forget(stem)
            kept = f"{folder}/{stem}.before-reset.ipynb"
            return f"{folder}/{src.name} 已换回课程的版本，它的进度清零；你原来的版本在 {kept}"
    raise SystemExit(f"课程里没有叫 {name} 的笔记本（看一看 notebooks/ 和 exercises/ 里的文件名）")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("update", "reset", "progress") or (argv[0] == "reset") != (len(argv) == 2):
        print(__doc__)
        return 2
    if argv[0] == "update":
        print("\n".join(update()) or "工作区已经是最新的。")
        print(f"你的工作区：{tracking.workspace_dir()}")
    elif argv[0] == "reset":
        print(reset(argv[1]))
    else:
        tracking.progress()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
