"""What the READMEs and module lists name exists: each test (`test_x.py::test_name`), test file, bench, make
target and module.

The READMEs back their claims with the names of the tests that show them (the launcher's "What it survives"
names some fifty); a test renamed or moved would leave a claim pointing at nothing, so each name is looked up here.
"""

from __future__ import annotations

import re
from pathlib import Path

from mgpu_helpers.bench.__main__ import BENCHES

ROOT = Path(__file__).resolve().parents[2]
READMES = sorted(
    p
    for pattern in ("README.md", "*/README.md", "mgpu_helpers/**/README.md")
    for p in ROOT.glob(pattern)
    if p.parts[len(ROOT.parts)] not in {".venv", "build", "workspace"}
)
# A test file (`test_x.py`, `tests/folder/test_x.py`) with or without `::test_name`, a bare `::test_name` (a test of
# the last file named), or another file of tests/ (`tests/learner_copies.py`).
TEST_REF = re.compile(r"((?:tests/[\w/]*)?test_\w+\.py)(?:::(test_\w+))?|::(test_\w+)|(tests/[\w/]+\.py)")


def _defined_tests(path: Path) -> set[str]:
    return set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), flags=re.M))


def _test_file(name: str) -> list[Path]:
    """The files a README's name can mean: the path itself if it has one, else every tests/**/name."""
    return [ROOT / name] if "/" in name else sorted((ROOT / "tests").rglob(name))


def _test_refs(text: str) -> list[tuple[str, str | None]]:
    """(file, test or None) for each reference, a bare ::test_name read with the test file named before it."""
    refs, current = [], None
    for file, test, bare_test, path in TEST_REF.findall(text):
        if path:
            refs.append((path, None))
        elif file:
            current = file
            refs.append((file, test or None))
        else:
            refs.append((current, bare_test))
    return refs


def test_the_readmes_are_found_and_name_tests():
    names = {p.relative_to(ROOT).as_posix() for p in READMES}
    assert {"README.md", "mgpu_helpers/launcher/README.md", "mgpu_helpers/bench/README.md"} <= names
    launcher = (ROOT / "mgpu_helpers/launcher/README.md").read_text(encoding="utf-8")
    assert len([t for _, t in _test_refs(launcher) if t]) >= 40, "the launcher's guarantees name their tests"


def test_a_bare_test_name_belongs_to_the_file_named_before_it():
    text = "`tests/a/test_x.py::test_one`, `::test_two`; `test_y.py` does (`::test_three`, `tests/z.py`)"
    assert _test_refs(text) == [
        ("tests/a/test_x.py", "test_one"),
        ("tests/a/test_x.py", "test_two"),
        ("test_y.py", None),
        ("test_y.py", "test_three"),
        ("tests/z.py", None),
    ]


def test_every_test_a_readme_names_exists():
    missing = []
    for readme in READMES:
        for file, test in _test_refs(readme.read_text(encoding="utf-8")):
            where = f"{readme.relative_to(ROOT)}: {file}" + (f"::{test}" if test else "")
            files = [f for f in _test_file(file or "") if f.is_file()] if file else []
            if len(files) != 1:
                missing.append(f"{where} ({len(files)} files of that name under tests/)")
            elif test and test not in _defined_tests(files[0]):
                missing.append(f"{where} (no such test in {files[0].relative_to(ROOT)})")
    assert not missing, "the READMEs name tests that are not there:\n" + "\n".join(missing)


def test_every_bench_and_make_target_a_readme_names_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))
    wrong = []
    for readme in READMES:
        text = readme.read_text(encoding="utf-8")
        benches = re.findall(r"mgpu_helpers\.bench ([a-z_]+)", text)
        wrong += [f"{readme.relative_to(ROOT)}: bench {b}" for b in benches if b not in BENCHES]
        named = re.findall(r"(?:`|^)make ([a-z][\w-]*)", text, flags=re.M)
        wrong += [f"{readme.relative_to(ROOT)}: make {t}" for t in named if t not in targets]
    assert not wrong, "the READMEs name commands that do not exist:\n" + "\n".join(wrong)


def test_the_launcher_readme_lists_every_module_of_the_launcher():
    readme = (ROOT / "mgpu_helpers/launcher/README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(\w+)\.py`", readme.split("## Its modules", 1)[1].split("\n## ", 1)[0]))
    modules = {p.stem for p in (ROOT / "mgpu_helpers/launcher").glob("*.py") if not p.stem.startswith("__")}
    assert listed == modules, f"launcher/README.md's module table: missing {modules - listed}, gone {listed - modules}"


def test_the_checkers_core_docstring_lists_every_module_of_it():
    import mgpu_helpers.checks.core as core

    listed = set(re.findall(r":mod:`\.(\w+)`", core.__doc__))
    modules = {p.stem for p in Path(core.__file__).parent.glob("*.py") if not p.stem.startswith("__")}
    assert listed == modules, f"checks/core/__init__.py's list: missing {modules - listed}, gone {listed - modules}"
