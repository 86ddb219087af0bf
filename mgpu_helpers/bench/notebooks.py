"""How long a learner waits: every notebook run top to bottom under nbval, one process each, as ``make test`` does,
beside a two-cell notebook (``mh.setup()`` and one 2-rank launch): the fixed cost every notebook pays. The fork
server's start is timed apart: a learner's first notebook of a session waits for it once, the rest fork.
"""

import glob
import os
import re
import subprocess
import sys
import time

import nbformat

from mgpu_helpers.bench import arguments
from mgpu_helpers.launcher import launch
from mgpu_helpers.report import progress, tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LESSON_TARGET_S = 12.0
COURSE_TARGET_S = 90.0
NOTEBOOK_TIMEOUT_S = 900
DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+\S+::Cell (\d+)\s*$", re.M)

FLOOR_CELLS = [
    "import mgpu_helpers as mh\nenv = mh.setup()",
    "def hello(rank, world_size):\n    return rank\n\nassert mh.run_ranks(hello, 2, quiet=True).values == [0, 1]",
]


def run_notebook(path: str) -> tuple[float, list[tuple[float, int]], bool]:
    """(wall seconds, [(seconds, code cell index)] slowest first, passed) of one nbval run."""
    cmd = [sys.executable, "-m", "pytest", path, "--nbval-lax", "--nbval-current-env", "-p", "no:randomly"]
    cmd += ["-p", "no:xdist", "-q", "--durations=0", "--durations-min=0.2"]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a hung notebook is a failed row, not the end of the benchmark
        return time.perf_counter() - start, [], False
    wall = time.perf_counter() - start
    cells: dict[int, float] = {}
    for seconds, _phase, index in DURATION.findall(out.stdout):
        cells[int(index)] = cells.get(int(index), 0.0) + float(seconds)
    return wall, sorted(((s, i) for i, s in cells.items()), reverse=True), out.returncode == 0


def floor_notebook() -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in FLOOR_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = os.path.join(ROOT, "build", "bench", "floor.ipynb")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    nbformat.write(nb, path)
    return path


def main(argv: list[str]) -> int:
    p = arguments("notebooks", __doc__)
    p.add_argument("--dirs", nargs="+", default=["notebooks"], help="folders of notebooks (default: notebooks)")
    p.add_argument("--top", type=int, default=3, help="slowest cells shown per notebook (default 3)")
    p.add_argument("names", nargs="*", help="only notebooks whose file name contains one of these")
    args = p.parse_args(argv)
    found = [path for d in args.dirs for path in sorted(glob.glob(os.path.join(ROOT, d, "*.ipynb")))]
    paths = [path for path in found if not args.names or any(n in os.path.basename(path) for n in args.names)]
    if not paths:
        what = f"no notebook in {', '.join(args.dirs)} matches {' '.join(args.names) or '*.ipynb'}"
        how = "give part of a file name, like 08 or stragglers, and folders that hold notebooks"
        p.error(f"{what}: {how} (notebooks, solutions, exercises)")
    start = time.perf_counter()
    launch.prewarm(wait=True)  # the fork server up, as every notebook but a session's first finds it
    launch.shutdown_server()
    ready = f"fork server ready in {time.perf_counter() - start:.1f} s"
    print(f"{ready} (0 s: it was up; the first notebook of a session waits this long once)")
    floor_s, _, floor_ok = run_notebook(floor_notebook())
    print(f"baseline (kernel + mh.setup() + one 2-rank launch): {floor_s:5.1f} s{'' if floor_ok else '  FAILED'}")
    total, failed, over, rows = 0.0, [], [], []
    for path in progress.iterate(paths, "notebooks"):
        wall, slowest, ok = run_notebook(path)
        total += wall
        name = os.path.relpath(path, ROOT)
        failed += [] if ok else [name]
        over += [name] if name.startswith("notebooks" + os.sep) and wall > LESSON_TARGET_S else []
        cells = ", ".join(f"{i}: {s:.1f}" for s, i in slowest[: args.top]) + ("" if ok else "  FAILED")
        rows.append({"notebook": name, "s": wall, "cells": cells})
    columns = [("notebook", "notebook", "{}"), ("s", "s", "{:.1f}")]
    columns.append(("cells", "slowest cells (code cell index: s)", "{}"))
    print(tables.format_table(rows, columns, left={"cells"}))
    targets = f"every lesson <= {LESSON_TARGET_S:.0f} s, notebooks/ <= {COURSE_TARGET_S:.0f} s"
    each = f"{total / max(1, len(paths)):.1f} s each, baseline {floor_s:.1f} s"
    print(f"total {total:.1f} s for {len(paths)} notebooks ({each}); targets on 2 cores: {targets}")
    if over:
        print("over the lesson target: " + ", ".join(over))
    if failed:
        print("FAILED: " + ", ".join(failed))
    return 1 if failed or not floor_ok else 0
