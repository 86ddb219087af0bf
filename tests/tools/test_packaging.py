"""The install: environment.yml and pyproject.toml name the same packages; the test command sees notebooks."""

from __future__ import annotations

import glob
import os
import re
import sys
import tomllib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _name(req: str) -> str:
    return re.split(r"[<>=!~ ;\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _canonical(req: str) -> str:
    """One spelling per requirement (quotes in markers, spaces, specifier order): packaging's."""
    from packaging.requirements import Requirement

    return str(Requirement(req))


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _pyproject_requirements() -> dict[str, str]:
    """name -> requirement, for the core dependencies and the test extra (the last marker variant wins)."""
    project = _project()
    reqs = project["dependencies"] + project["optional-dependencies"]["test"]
    return {_name(r): r.replace(" ", "") for r in reqs}


def _environment_list() -> list[str]:
    with open(os.path.join(ROOT, "environment.yml")) as f:
        env = yaml.safe_load(f)
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return [r for r in pip if not r.startswith("-e")]


def test_environment_yml_and_pyproject_agree():
    """environment.yml (Linux GPU machines, PyPI's CUDA 13 torch) = dependencies + test + the cuda13 extra."""
    project = _project()
    extras = project["optional-dependencies"]
    want = project["dependencies"] + extras["test"] + extras["cuda13"]
    assert sorted(map(_canonical, _environment_list())) == sorted(map(_canonical, want))


def test_python_versions_declared_are_the_ones_tested():
    # tomllib (this file) is new in 3.11: a lower declaration would promise versions the suite cannot run on.
    assert _project()["requires-python"] == ">=3.11"
    assert sys.version_info >= (3, 11)


def test_numpy_is_capped_below_2_5_for_numba_cuda():
    assert "<2.5" in _pyproject_requirements()["numpy"]


def test_numba_cuda_has_a_route_on_every_platform_and_cupy_is_an_extra():
    deps = [_canonical(r) for r in _project()["dependencies"]]
    numba_cuda = [d for d in deps if d.startswith("numba-cuda")]
    assert numba_cuda == [
        'numba-cuda>=0.30.4; sys_platform != "darwin"',
        'numba-cuda==0.20.1; sys_platform == "darwin"',
    ]
    assert not [d for d in deps if d.startswith("cupy")], "CuPy must follow torch's CUDA major: an extra"
    assert "tqdm" in _pyproject_requirements()


def test_ipykernel_is_capped_below_7_and_the_installed_one_is():
    # ipykernel 7 can leave a request unread on the shell socket (ipython/ipykernel#1554): a notebook hangs.
    assert "<7" in _pyproject_requirements()["ipykernel"]
    from importlib.metadata import version

    assert int(version("ipykernel").split(".")[0]) < 7, "reinstall: pip install -e '.[test]' (ipykernel<7)"


def test_makefile_installs_the_cpu_build_of_torch():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^TORCH\s*\?=\s*torch==[\d.]+\+cpu$", makefile, re.M)


def test_notebook_globs_find_the_course():
    found = glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))
    assert len(found) >= 1, "the notebook glob found nothing: nbval would silently test nothing"
    assert os.path.exists(os.path.join(ROOT, "notebooks", "00_setup.ipynb"))


def test_notebooks_are_committed_clean():
    from mgpu_helpers.tools import nbtools

    paths = sorted(glob.glob(os.path.join(ROOT, d, "*.ipynb")) for d in ("notebooks", "solutions", "exercises"))
    paths = [p for group in paths for p in group]
    assert paths
    problems = [p for path in paths for p in nbtools.problems(path)]
    assert problems == []


def test_notebooks_hold_no_machine_paths():
    pattern = re.compile(r"/(home|root|tmp|work)/[\w.-]+")
    for d in ("notebooks", "solutions", "exercises"):
        for path in glob.glob(os.path.join(ROOT, d, "*.ipynb")):
            text = open(path, encoding="utf-8").read()
            assert not pattern.search(text), f"{path} holds a machine path"
