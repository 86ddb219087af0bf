"""The course installs on the platforms the README names: the dependency set resolves, wheels only.

For Linux x86-64, Linux aarch64 and macOS arm64 this asks pip (``install --dry-run --only-binary=:all:
--platform ...``) to resolve ``pyproject.toml``'s dependencies against PyPI, for the oldest Python that
``requires-python`` declares. pip evaluates environment markers (``sys_platform == 'darwin'``) for the machine
it runs on, not for ``--platform``, so the child pip here runs with its marker environment set to the target
platform's. Needs PyPI: skips, saying so, where it cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from mgpu_helpers.tools import install

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYPI = "https://pypi.org/simple/"


def manylinux(arch: str, glibc_minor: int = 28) -> list[str]:
    """Every manylinux tag a glibc 2.``glibc_minor`` machine accepts: pip does not expand ``--platform``
    to the older glibc versions itself (CUDA wheels are tagged manylinux_2_27, others manylinux2014)."""
    return [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 16, -1)] + [f"manylinux2014_{arch}"]


# name -> (marker environment, pip --platform tags, the extras the installer adds there)
PLATFORMS = {
    "linux-x86_64": (
        {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"},
        manylinux("x86_64"),
        ["test", "cuda13"],
    ),
    "linux-aarch64": (
        {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64"},
        manylinux("aarch64"),
        ["test", "cuda13"],
    ),
    "macos-arm64": (
        {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
        ["macosx_14_0_arm64"],
        ["test"],
    ),
}

# Run pip with the target platform's marker environment (pip's own vendored packaging evaluates markers).
PIP_FOR_PLATFORM = """
import json, sys
import pip._vendor.packaging.markers as markers
env = markers.default_environment()
env.update(json.loads(sys.argv[1]))
markers.default_environment = lambda: dict(env)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def oldest_python() -> str:
    m = re.fullmatch(r">=\s*(\d+\.\d+)", _project()["requires-python"].strip())
    assert m, "requires-python should be a lower bound like '>=3.11'"
    return m.group(1)


def requirements_for(marker_env: dict, extras) -> list[str]:
    """pyproject's dependencies plus ``extras`` that apply on the platform, markers evaluated and dropped."""
    project = _project()
    env = dict(
        default_environment(), python_version=oldest_python(), python_full_version=oldest_python() + ".0", **marker_env
    )
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    out = []
    for text in reqs:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            req.marker = None
            out.append(str(req))
    return out


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(PYPI + "pip/", timeout=15) as r:
            return r.status == 200
    except OSError:
        return False


def resolve(name: str, tmp_dir: str) -> dict:
    """pip's report of a dry-run install for platform ``name``: ``{"rc", "stderr", "install": {name: version}}``."""
    marker_env, tags, extras = PLATFORMS[name]
    reqs = os.path.join(tmp_dir, f"{name}.txt")
    with open(reqs, "w") as f:
        f.write("\n".join(requirements_for(marker_env, extras)) + "\n")
    report = os.path.join(tmp_dir, f"{name}.json")
    cmd = [
        sys.executable,
        "-c",
        PIP_FOR_PLATFORM,
        json.dumps(marker_env),
        "--isolated",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--only-binary=:all:",
        "-q",
        "--python-version",
        oldest_python(),
        "--implementation",
        "cp",
        "--index-url",
        PYPI,
        "--target",
        os.path.join(tmp_dir, f"{name}-target"),
        "--report",
        report,
        "-r",
        reqs,
    ]
    for tag in tags:
        cmd += ["--platform", tag]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    installed = {}
    if out.returncode == 0:
        with open(report) as f:
            for item in json.load(f)["install"]:
                installed[item["metadata"]["name"].lower().replace("_", "-")] = item["metadata"]["version"]
    return {"rc": out.returncode, "stderr": out.stderr[-4000:], "install": installed}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    if not _pypi_reachable():
        pytest.skip(
            f"PyPI ({PYPI}) cannot be reached: the platform resolution needs it (CI and the course machines reach it)"
        )
    tmp = str(tmp_path_factory.mktemp("platforms"))
    with ThreadPoolExecutor(len(PLATFORMS)) as pool:
        futures = {name: pool.submit(resolve, name, tmp) for name in PLATFORMS}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_the_dependency_set_resolves_with_wheels_only(resolved, name):
    r = resolved[name]
    assert r["rc"] == 0, f"{name}: pip could not resolve the course's dependencies:\n{r['stderr']}"
    got = r["install"]
    for pkg in (
        "torch",
        "numpy",
        "numba",
        "numba-cuda",
        "jupyterlab",
        "ipykernel",
        "ipywidgets",
        "tqdm",
        "nbval",
        "matplotlib",
    ):
        assert pkg in got, f"{name}: {pkg} missing from the resolution"
    numpy_version = tuple(int(x) for x in got["numpy"].split(".")[:2])
    assert numpy_version < (2, 5), f"{name}: numpy {got['numpy']} (numba-cuda needs < 2.5)"
    assert int(got["ipykernel"].split(".")[0]) < 7


def test_linux_gets_numba_cuda_with_its_binary_and_cupy_for_torchs_cuda(resolved):
    for name in ("linux-x86_64", "linux-aarch64"):
        got = resolved[name]["install"]
        assert tuple(int(x) for x in got["numba-cuda"].split(".")[:3]) >= (0, 30, 4), (name, got["numba-cuda"])
        assert "cupy-cuda13x" in got and "cupy-cuda12x" not in got, name


def test_macos_gets_the_pure_python_numba_cuda_and_no_cupy_or_cuda_libraries(resolved):
    got = resolved["macos-arm64"]["install"]
    assert got["numba-cuda"] == "0.20.1"
    assert not [p for p in got if p.startswith("cupy")]
    assert not [p for p in got if p.startswith("nvidia-") and p != "nvidia-ml-py"], "CUDA libraries on a Mac"


def test_the_macos_numba_cuda_wheel_runs_a_kernel_in_the_simulator(resolved, tmp_path):
    """numba-cuda 0.20.1 is pure Python: installed next to this machine's numba it must run the course's
    vecAdd in the CUDA simulator, as it will on a Mac (same numba as the Mac resolution where they match)."""
    import numba

    target = tmp_path / "site"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "install",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--index-url",
            PYPI,
            "--target",
            str(target),
            "numba-cuda==0.20.1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    code = (
        "import numpy as np, numba.cuda as cuda, numba_cuda\n"
        "from mgpu_helpers.lessons import cuda_model as CM\n"
        "a = np.arange(300, dtype=np.float32); c = np.zeros_like(a)\n"
        "CM.vec_add[3, 128](a, a, c, a.size)\n"
        "assert (c == 2 * a).all() and cuda.simulator_is_enabled if hasattr(cuda, 'simulator_is_enabled') "
        "else (c == 2 * a).all()\n"
        "print(numba_cuda.__version__, cuda.__file__)\n"
    )
    env = dict(
        os.environ,
        NUMBA_ENABLE_CUDASIM="1",
        PYTHONPATH=os.pathsep.join([str(target), ROOT, os.environ.get("PYTHONPATH", "")]),
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("0.20.1") and str(target) in run.stdout
    if resolved["macos-arm64"]["install"]["numba"] != numba.__version__:
        pytest.skip(
            f"ran with numba {numba.__version__}; the Mac resolution picks "
            f"{resolved['macos-arm64']['install']['numba']}"
        )


# ----------------------------------------------------------------------------------------------------------
# Which torch the installer asks for, and where (pure).


def test_linux_without_a_gpu_asks_the_default_lookup_first_then_the_cpu_index():
    attempts = install.torch_attempts("Linux", gpu=False, torch_spec="torch==2.13.0+cpu")
    assert attempts[0] == ["torch==2.13.0+cpu"]  # local wheel folder / configured index only
    assert attempts[1] == ["--extra-index-url", install.CPU_INDEX, "torch==2.13.0+cpu"]
    assert all("+cpu" in a[-1] for a in attempts)  # never PyPI's CUDA build


def test_a_gpu_or_a_mac_takes_pypis_default_torch_and_an_explicit_spec_wins():
    assert install.torch_attempts("Linux", gpu=True, torch_spec="torch==2.13.0+cpu") == [["torch>=2.11"]]
    assert install.torch_attempts("Darwin", gpu=False, torch_spec="torch==2.13.0+cpu") == [["torch>=2.11"]]
    assert install.torch_attempts("Linux", gpu=False, torch_spec="torch") == [["torch"]]
    assert install.torch_attempts("Linux", gpu=False, extra_flags=("-v",))[0] == ["-v", install.CPU_TORCH]


def test_cupy_follows_torchs_cuda_major_and_is_left_out_on_macos():
    assert install.cupy_extra("Linux", True, "13.0") == "cuda13"
    assert install.cupy_extra("Linux", True, "12.8") == "cuda12"
    assert install.cupy_extra("Linux", False, None) == "cuda12"
    assert install.cupy_extra("Darwin", False, None) is None
    assert install.cupy_extra("Linux", True, "11.8") is None
    extras = _project()["optional-dependencies"]
    assert {install.cupy_extra("Linux", True, v) for v in ("12.8", "13.0")} <= set(extras)


def test_the_makefile_hands_its_torch_choice_to_the_installer():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^TORCH\s*\?=\s*torch==[\d.]+\+cpu$", makefile, re.M)
    assert "mgpu_helpers/tools/install.py" in makefile and '--torch "$(TORCH)"' in makefile
    assert re.search(r"^TORCH_INDEX\s*\?=\s*https://download\.pytorch\.org/whl/cpu$", makefile, re.M)


def test_the_installer_runs_in_a_bare_python_before_any_dependency_is_installed():
    """make install runs the installer by its path in a new venv: it must need nothing but the standard library
    (the package's own __init__ needs lazy_loader, which the installer installs)."""
    import ast

    path = os.path.join(ROOT, "mgpu_helpers", "tools", "install.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)
    done = subprocess.run([sys.executable, "-I", path, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--torch" in done.stdout, done.stderr


def test_this_machines_default_lookup_finds_the_cpu_build_when_it_has_a_wheel_folder():
    """On the course machines (a wheel folder in PIP_FIND_LINKS) the first attempt succeeds, so the
    installer never asks PyTorch's index; elsewhere this says what it could not check."""
    folder = os.environ.get("PIP_FIND_LINKS")
    if not folder or not os.path.isdir(folder):
        pytest.skip("no local wheel folder (PIP_FIND_LINKS): the installer will ask PyTorch's CPU index")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = [w for w in os.listdir(folder) if w.startswith("torch-") and "+cpu" in w and tag in w]
    if not wheels:
        pytest.skip(f"{folder} holds no CPU torch wheel for {tag}")
    spec = install.CPU_TORCH
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--no-index",
            "--find-links",
            folder,
            spec,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"{spec} is not in {folder}: {out.stderr[-1500:]}"
