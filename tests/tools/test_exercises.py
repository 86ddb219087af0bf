"""Exercises generated from solutions, checked both ways (nbgrader's validate and validate --invert).

- the generator turns solution regions into stubs that say how much to write, and tags the cells that use them;
- the committed exercises are exactly what regenerating writes;
- every checker passes the solution function (taken from the solution notebook's own cells) and fails the
  generated stub with the "not done yet" message (each checker's own wrong answers are tested in
  tests/checks/test_checks_<module>.py);
- the learner's copy of a lesson is built from the worked one.
"""

import ast
import glob
import os
import re
import shutil
import textwrap

import nbformat
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)  # before numba is imported: the CUDA simulator in CPU mode

from mgpu_helpers import checks  # noqa: E402
from mgpu_helpers.tools import exercises  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_CALL = re.compile(r"checks\.(check_\w+)\((\w+)")


# --------------------------------------------------------------------------------------------------------
# Reading the solution notebooks: which function each checker is given, and the cells that define it.


def _is_setup_cell(source: str) -> bool:
    """Imports, or ``env = mh.setup()``: what a definition cell needs before it runs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and "mh.setup(" in ast.unparse(node.value):
            continue
        return False
    return bool(tree.body)


def _exercise_pairs():
    """(notebook, checker name, function name) for every check cell of every solution notebook."""
    pairs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "solutions", "ex*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                for checker, fn in CHECK_CALL.findall(cell.source):
                    pairs.append((os.path.basename(path), checker, fn))
    return pairs


def _namespace(notebook: str, stub: bool) -> dict:
    """Run a solution notebook's set-up and definition cells (stubbed when ``stub``) in a fresh namespace.

    The namespace's module name is not importable, so the functions travel to the ranks by value, as
    they do from a notebook's ``__main__``.
    """
    nb = nbformat.read(os.path.join(ROOT, "solutions", notebook), as_version=4)
    ns = {"__name__": f"exercise_{'stub' if stub else 'solution'}_{notebook[:4]}"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        if exercises.BEGIN in src:
            if stub:
                src, _ = exercises.stub_source(src)
        elif not _is_setup_cell(src):
            continue
        src = src.replace("env = mh.setup()", "env = mh.setup(show=False, prewarm=False)")
        exec(compile(src, f"<{notebook}>", "exec"), ns)
    return ns


_NAMESPACES: dict = {}


def _function(notebook: str, name: str, stub: bool):
    key = (notebook, stub)
    if key not in _NAMESPACES:
        _NAMESPACES[key] = _namespace(notebook, stub)
    return _NAMESPACES[key][name]


PAIRS = _exercise_pairs()


# --------------------------------------------------------------------------------------------------------
# The generator.


def test_solution_region_becomes_a_stub_that_says_how_many_lines_to_write():
    src = textwrap.dedent('''\
        def f(x, n):
            """Docstring stays."""
            import torch
            ### BEGIN SOLUTION
            y = x + 1

            # a comment does not count
            for _ in range(n):
                y = y * 2
            return y
            ### END SOLUTION
        ''')
    out, names = exercises.stub_source(src)
    assert names == ["f"]
    assert out == textwrap.dedent('''\
        def f(x, n):
            """Docstring stays."""
            import torch
            raise NotImplementedError("练习：补全这里（约 4 行）")
        ''')


def test_stub_keeps_the_indentation_of_a_region_inside_a_kernel_branch():
    src = "@cuda.jit\ndef k(a, n):\n    i = 0\n    if i < n:\n        ### BEGIN SOLUTION\n        a[i] = 1\n        ### END SOLUTION\n"
    out, names = exercises.stub_source(src)
    assert names == ["k"]
    assert '        raise NotImplementedError("练习：补全这里（约 1 行）")' in out.splitlines()


@pytest.mark.parametrize(
    "src",
    [
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n",  # no END
        "def f():\n    return 1\n    ### END SOLUTION\n",  # END without BEGIN
        "x = 1\n### BEGIN SOLUTION\nprint(2)\n### END SOLUTION\n",  # outside a function, not a name
    ],
)
def test_unpaired_or_stray_markers_are_refused(src):
    with pytest.raises(exercises.MarkerError):
        exercises.stub_source(src)


def _tiny_solution():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# Title"),
        new_code_cell("def shard(costs):\n    ### BEGIN SOLUTION\n    return sorted(costs)\n    ### END SOLUTION"),
        new_code_cell("print(shard([3, 1]))", outputs=[nbformat.v4.new_output("stream", text="[1, 3]\n")]),
        new_code_cell("# EXERCISE_CHECK\nassert True"),
        new_code_cell("print('unrelated')"),
        new_markdown_cell("Spec.\n<!-- BEGIN SOLUTION -->\nthe answer\n<!-- END SOLUTION -->\nMore."),
    ]
    for k, c in enumerate(nb.cells):
        c["id"] = f"c{k}"
    return nb


def test_cells_that_use_a_stub_or_are_marked_as_checks_are_tagged_raises_exception():
    ex, stubbed = exercises.make_exercise(_tiny_solution(), "ex00_tiny.ipynb")
    tags = [c.metadata.get("tags", []) for c in ex.cells]
    assert stubbed == ["shard"]
    assert tags[1] == [] and tags[4] == []  # the definition and the unrelated cell
    assert tags[2] == ["raises-exception"] and tags[3] == ["raises-exception"]
    assert "NotImplementedError" in ex.cells[1].source and "sorted" not in ex.cells[1].source


def test_markdown_answers_are_folded_and_exercises_carry_no_outputs():
    ex, _ = exercises.make_exercise(_tiny_solution(), "ex00_tiny.ipynb")
    md = ex.cells[5].source
    assert md.startswith("Spec.") and md.endswith("More.") and "<!--" not in md
    assert md.index("<details>") < md.index("the answer") < md.index("</details>")
    assert "solutions/ex00_tiny.ipynb" in ex.cells[0].source and "generate" not in ex.cells[0].source
    assert all(
        c.get("outputs", []) == [] and c.get("execution_count") is None for c in ex.cells if c.cell_type == "code"
    )


def test_an_answer_already_inside_details_is_not_folded_twice():
    src = "Q?\n<details><summary>after trying</summary>\n<!-- BEGIN SOLUTION -->\nA.\n<!-- END SOLUTION -->\n</details>"
    assert exercises.fold_markdown(src) == "Q?\n<details><summary>after trying</summary>\nA.\n</details>"


def test_hidden_tests_are_left_out_and_a_cell_of_nothing_else_goes():
    src = (
        "x = f()\n    ### BEGIN HIDDEN TESTS\nassert x == 3\n### END HIDDEN TESTS\nprint(x)\n"
        "if x:\n    ### BEGIN HIDDEN TESTS\n    assert x > 0\n    ### END HIDDEN TESTS\n    print('yes')"
    )
    assert exercises.without_hidden_tests(src) == "x = f()\nprint(x)\nif x:\n    print('yes')"
    assert exercises.without_hidden_tests("# why\n### BEGIN HIDDEN TESTS\nassert ok\n### END HIDDEN TESTS") is None
    assert exercises.without_hidden_tests("no tests\n") == "no tests\n"


@pytest.mark.parametrize(
    "src",
    [
        "### BEGIN HIDDEN TESTS\nassert 1",
        "assert 1\n### END HIDDEN TESTS",
        "### BEGIN HIDDEN TESTS\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS",
    ],
)
def test_unpaired_hidden_test_markers_are_refused(src):
    with pytest.raises(exercises.MarkerError):
        exercises.without_hidden_tests(src)


def test_committed_exercises_are_what_regenerating_writes():
    assert exercises.out_of_sync() == []


def test_check_command_fails_when_an_exercise_was_edited_by_hand(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "exercises"
    shutil.copytree(exercises.EXERCISES_DIR, copy)
    target = sorted(copy.glob("*.ipynb"))[0]
    target.write_text(target.read_text(encoding="utf-8").replace("练习", "Exercise", 1), encoding="utf-8")
    monkeypatch.setattr(exercises, "EXERCISES_DIR", str(copy))
    assert exercises.main(["check"]) == 1
    assert target.name in capsys.readouterr().out
    assert exercises.main(["generate"]) == 0 and exercises.main(["check"]) == 0


def test_every_lesson_from_01_to_14_has_exercises_and_there_are_at_least_24():
    notebooks = {nb for nb, _, _ in PAIRS}
    assert len(PAIRS) >= 24, f"only {len(PAIRS)} exercises found"
    lessons = {os.path.basename(p)[:2] for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))} - {"00"}
    assert lessons == {f"{k:02d}" for k in range(1, 15)}
    assert {nb[2:4] for nb in notebooks} == lessons, sorted(lessons - {nb[2:4] for nb in notebooks})
    assert {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "exercises", "*.ipynb"))} == notebooks


def test_every_exercise_function_is_stubbed_in_its_exercise_notebook():
    for nb_name in {nb for nb, _, _ in PAIRS}:
        ex = nbformat.read(os.path.join(ROOT, "exercises", nb_name), as_version=4)
        text = "\n".join(c.source for c in ex.cells)
        assert exercises.BEGIN not in text and "练习：补全这里" in text
        for nb, checker, fn in PAIRS:
            if nb == nb_name:
                cell = next(c for c in ex.cells if c.cell_type == "code" and f"checks.{checker}({fn}" in c.source)
                assert "raises-exception" in cell.metadata.get("tags", []), (nb, checker)


# --------------------------------------------------------------------------------------------------------
# Both ways: the solution passes, the untouched stub fails with the "not done" message.


# Checkers that need a GPU (CuPy cannot run without one): on a CPU they say they skipped, and still fail the stub.
NEEDS_GPU = {"check_saxpy_cupy"}


@pytest.mark.parametrize("notebook,checker,fn", PAIRS, ids=[f"{c}" for _, c, _ in PAIRS])
def test_solution_passes_its_checker(notebook, checker, fn, capsys):
    getattr(checks, checker)(_function(notebook, fn, stub=False))
    out = capsys.readouterr().out
    if checker in NEEDS_GPU and not ENV.cupy:
        assert out.startswith("跳过：") and "需要 GPU" in out and "还没有被检查" in out, out
    else:
        assert out.startswith("通过："), out


@pytest.mark.parametrize("notebook,checker,fn", PAIRS, ids=[f"{c}" for _, c, _ in PAIRS])
def test_untouched_stub_fails_its_checker_saying_it_is_not_done(notebook, checker, fn):
    with pytest.raises(checks.CheckFailed) as info:
        getattr(checks, checker)(_function(notebook, fn, stub=True))
    assert str(info.value).startswith(checks.NOT_DONE), str(info.value)
    assert fn in str(info.value)


# --------------------------------------------------------------------------------------------------------
# Lessons: the learner's notebook from the worked one.


def test_a_region_outside_a_function_keeps_only_names_set_to_none_and_their_comments():
    src = textwrap.dedent("""\
        import math
        ### BEGIN SOLUTION
        # ✎ the ratio of the two copies to the kernel
        my_ratio = 12.5   # 拷贝 / Kernel
        my_claims = {
            "winner": "ring",
        }
        ### END SOLUTION
        print(my_ratio)
        """)
    out, names = exercises.stub_source(src)
    assert names == []
    assert out == textwrap.dedent("""\
        import math
        # ✎ the ratio of the two copies to the kernel
        my_ratio = None  # 拷贝 / Kernel
        my_claims = None
        print(my_ratio)
        """)


def test_a_region_outside_a_function_that_is_not_assignments_is_refused():
    with pytest.raises(exercises.MarkerError, match="only assignments"):
        exercises.stub_source("### BEGIN SOLUTION\nfor i in range(3):\n    print(i)\n### END SOLUTION\n")


def test_hint_comments_of_a_function_region_stay_in_the_stub():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    # ✎ one line: double it\n    return 2 * x\n    ### END SOLUTION\n"
    out, _ = exercises.stub_source(src)
    assert out.splitlines()[1:3] == [
        "    # ✎ one line: double it",
        '    raise NotImplementedError("练习：补全这里（约 1 行）")',
    ]


def _tiny_lesson():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# 99 A lesson"),
        new_code_cell("#| export\ndef double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
        new_code_cell("double = mh.checks.fill_in(double, check, reference, 'double')"),
        new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(double(2))", outputs=[nbformat.v4.new_output("stream", text="4\n")]),
        new_markdown_cell("Why?\n<!-- BEGIN SOLUTION -->\nbecause\n<!-- END SOLUTION -->"),
    ]
    for k, c in enumerate(nb.cells):
        c["id"] = f"c{k}"
    return nb


def test_a_lesson_keeps_checked_outputs_drops_the_export_line_and_tags_nothing():
    les, stubbed = exercises.make_lesson(_tiny_lesson(), "99_lesson.ipynb")
    assert stubbed == ["double"]
    assert les.cells[1].source.startswith("def double(x):") and "2 * x" not in les.cells[1].source
    assert all("raises-exception" not in c.metadata.get("tags", []) for c in les.cells)
    assert les.cells[3].outputs and les.cells[3].outputs[0]["text"] == "4\n"  # what nbval compares with
    assert les.cells[4].source.index("<details>") < les.cells[4].source.index("because")
    assert "solutions/99_lesson.ipynb" in les.cells[0].source


def test_the_learners_copy_has_no_outputs_no_check_marker_and_no_hidden_test_cell():
    nb = _tiny_lesson()
    nb.cells.insert(4, nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nassert double(3) == 6\n### END HIDDEN TESTS"))
    tested, _ = exercises.make_lesson(nb, "99_lesson.ipynb")
    assert len(tested.cells) == 6 and "assert double(3) == 6" in tested.cells[4].source
    copy = exercises.learner_copy(tested)
    assert [c.source for c in copy.cells if c.cell_type == "code"][-1] == "print(double(2))"
    assert len(copy.cells) == 5 and all(c.outputs == [] for c in copy.cells if c.cell_type == "code")
    kept = exercises.learner_copy(tested, keep_outputs=True)
    assert kept.cells[3].outputs[0]["text"] == "4\n" and kept.cells[3].source == "print(double(2))"


def test_a_checked_cell_may_not_hold_a_fill_in():
    nb = _tiny_lesson()
    nb.cells[3].source = "# NBVAL_CHECK_OUTPUT\n### BEGIN SOLUTION\nx = 1\n### END SOLUTION\nprint(x)"
    with pytest.raises(exercises.MarkerError, match="checked by nbval"):
        exercises.make_lesson(nb, "99_lesson.ipynb")


def test_lessons_go_to_notebooks_and_exercises_to_exercises():
    assert exercises.learner_path("/x/solutions/05_collectives.ipynb") == os.path.join(
        exercises.NOTEBOOKS_DIR, "05_collectives.ipynb"
    )
    assert exercises.learner_path("/x/solutions/ex05_collectives.ipynb").startswith(exercises.EXERCISES_DIR)


def test_a_worked_only_cell_becomes_an_import_of_what_it_defines():
    nb = _tiny_lesson()
    nb.metadata["mgpu"] = {"export": "lesson99"}
    nb.cells.insert(
        2,
        nbformat.v4.new_code_cell(
            "#| export\ndef full(x, y=2):\n    return x * y\n\n\nSCALE = 3",
            metadata={"tags": ["worked-only"], "jupyter": {"source_hidden": True}},
        ),
    )
    nb.cells[2]["id"] = "worked"
    les, _ = exercises.make_lesson(nb, "99_lesson.ipynb")
    cell = les.cells[2]
    assert "return x * y" not in cell.source
    assert cell.source.splitlines()[-1] == "from mgpu_helpers.lessons.lesson99 import full, SCALE"
    assert "tags" not in cell.metadata and "jupyter" not in cell.metadata
    nb.cells[2].source = nb.cells[2].source.replace("#| export\n", "")
    with pytest.raises(exercises.MarkerError, match="not an `#| export` cell"):
        exercises.make_lesson(nb, "99_lesson.ipynb")
