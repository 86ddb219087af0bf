"""The table of what each lesson uses, in mgpu_helpers/README.md, is what the code says; how names are read."""

import pytest

from mgpu_helpers.tools import lessonmap


def test_the_readme_table_is_what_the_notebooks_use():
    assert lessonmap.out_of_date() == [], f"run `{lessonmap.COMMAND}` and commit mgpu_helpers/README.md"


def test_chains_imports_and_package_names_are_read_and_traced_to_their_modules():
    code = lessonmap.python_of_cell(
        "%%time\n"
        "import mgpu_helpers as mh\n"
        "from mgpu_helpers.measure import sweep\n"
        "from mgpu_helpers.report.sizes import format_bytes\n"
        "!nvidia-smi\n"
        "topology = mh.models.topology\n"
        "res = mh.run_ranks(f, 2)\n"
        "bounds = mh.lessons.ring.chunk_bounds(10, 3)\n"
        "x = other.models.costs  # not the course's package\n"
    )
    found = lessonmap.references(code)
    assert found == {
        ("measure", "sweep"),
        ("report", "sizes", "format_bytes"),
        ("models", "topology"),
        ("run_ranks",),
        ("lessons", "ring", "chunk_bounds"),
    }
    modules = {lessonmap.module_of(path) for path in found}
    assert modules == {"measure.sweep", "report.sizes", "models.topology", "launcher.launch", "lessons.ring"}


def test_a_lesson_row_names_what_it_writes_apart_from_what_it_uses():
    rows = {lesson: (writes, used) for lesson, writes, used in map(lessonmap.lesson_row, lessonmap.lesson_paths())}
    writes, used = rows["06_ownership_capacity"]
    assert writes == ["lessons.sharding_rules"] and "lessons.sharding_rules" not in used
    assert "checks.sharding" in used and "course" in used
    assert "lessons.ring" in rows["09_code_walkthrough"][1]  # 09 reuses 05's and 06's exported code


def test_the_table_goes_between_the_markers_and_nowhere_else():
    readme = f"# map\n{lessonmap.BEGIN}\nold table\n{lessonmap.END}\nafter\n"
    assert lessonmap.with_table(readme, "new") == f"# map\n{lessonmap.BEGIN}\nnew\n{lessonmap.END}\nafter\n"
    with pytest.raises(ValueError, match="marker"):
        lessonmap.with_table("# map without markers\n", "new")
