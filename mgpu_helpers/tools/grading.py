"""A teacher's nbgrader course, built from the worked notebooks: the learner's copies, graded.

    python -m mgpu_helpers.tools.grading setup DIR [NAME ...]

writes ``DIR/nbgrader_config.py`` and nbgrader's source ``DIR/source/NAME/NAME.ipynb`` for each named notebook
(default: every exercise); from there on it is nbgrader's own commands, run in DIR (README.md, "Teachers"). The
source is the learner's copy with the worked functions still between nbgrader's markers for it to clear.
"""

import sys
from pathlib import Path

from mgpu_helpers.tools import exercises

CONFIG = """\
# nbgrader's configuration for the mgpu-course class (written by python -m mgpu_helpers.tools.grading setup).
import os

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# The learner's copies stub a function with this line; the course's checks know it for "not written yet".
c.ClearSolutions.code_stub = {{"python": 'raise NotImplementedError("{stub}")'}}
# A check cell deleted from a submission is put back (and run) rather than lost.
c.OverwriteCells.add_missing_cells = True
# A cell still running after this many seconds (an endless loop) is stopped; only its own points are lost.
c.Execute.timeout = {timeout}
# An unwritten fill-in fails its check instead of borrowing the course's version (mgpu_helpers/checks/core/fill_in.py).
os.environ["MGPU_GRADING"] = "1"
# A cell that kills its kernel (a crash) loses its points; a new kernel runs the cells after it.
from mgpu_helpers.tools.grading import autograde_preprocessors  # noqa: E402

c.Autograde.autograde_preprocessors = autograde_preprocessors()
"""
CELL_TIMEOUT_S = 120


def autograde_preprocessors() -> list:
    """nbgrader's autograde steps, its ``Execute`` replaced by one that survives a crashed kernel."""
    from jupyter_core.utils import run_sync
    from nbclient.exceptions import DeadKernelError
    from nbformat.v4 import new_output
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    class CrashSafeExecute(Execute):
        def preprocess_cell(self, cell, resources, index):
            try:
                return super().preprocess_cell(cell, resources, index)
            except DeadKernelError:
                died = (
                    "KernelDied: 这一格让内核进程退出了（崩溃），它的分数为 0；之后的单元格在一个新的内核里接着运行。"
                )
                cell.outputs.append(new_output("error", ename="KernelDied", evalue="", traceback=[died]))
                self.kc.stop_channels()
                run_sync(self.km.restart_kernel)(now=True)  # an AsyncKernelManager (nbgrader's)
                self.start_new_kernel_client()
                return cell, self.resources

    return [CrashSafeExecute if step is Execute else step for step in Autograde.autograde_preprocessors.default()]


def grading_source(solution_path: str):
    return exercises.learner_copy(exercises.tested_version(solution_path, keep_solutions=True), hidden_tests=True)


def setup(folder, names=(), solutions=None, timeout: int = CELL_TIMEOUT_S) -> list[Path]:
    """Write nbgrader's course folder; returns the source notebooks written."""
    import nbformat

    folder = Path(folder)
    paths = [Path(p) for p in (solutions or exercises.solution_paths())]
    chosen = [p for p in paths if p.stem in names] if names else [p for p in paths if not exercises.is_lesson(str(p))]
    if missing := set(names) - {p.stem for p in chosen}:
        raise SystemExit(f"no worked notebook named {', '.join(sorted(missing))} in solutions/")
    folder.mkdir(parents=True, exist_ok=True)
    config = CONFIG.format(stub=exercises.STUB_TEXT.split("（")[0], timeout=timeout)
    (folder / "nbgrader_config.py").write_text(config, encoding="utf-8")
    written = []
    for path in chosen:
        target = folder / "source" / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(grading_source(str(path)), target)
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "setup":
        print(__doc__)
        return 2
    for path in setup(argv[1], argv[2:]):
        print(f"wrote {path}")
    print(f"nbgrader's course folder: {argv[1]} (run nbgrader's commands there; README.md, Teachers)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
