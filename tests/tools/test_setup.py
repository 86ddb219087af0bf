"""setup(), hardware detection and the backend choice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mgpu_helpers import hardware

ROOT = __file__.rsplit("/tests/", 1)[0]


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_importing_mgpu_helpers_imports_nothing_heavy():
    out = _run("import sys, mgpu_helpers\nprint(sorted(m for m in ('numba', 'cupy', 'torch') if m in sys.modules))")
    assert out.strip() == "[]"


def test_setup_in_cpu_mode_switches_on_the_numba_simulator():
    out = _run(
        "import os, sys\n"
        "os.environ['MGPU_FORCE_CPU'] = '1'\n"
        "import mgpu_helpers as mh\n"
        "env = mh.setup(show=False, prewarm=False)\n"
        "from numba import cuda\n"
        "print(env.mode, env.gpus, env.backend, env.numba_simulator, env.cupy,\n"
        "      'numba.cuda.simulator' in sys.modules, cuda.is_available())"
    )
    assert out.split() == ["cpu", "()", "gloo", "True", "False", "True", "True"]


def test_setup_warns_when_numba_was_imported_first():
    out = _run(
        "import os, warnings\n"
        "os.environ['MGPU_FORCE_CPU'] = '1'\n"
        "os.environ.pop('NUMBA_ENABLE_CUDASIM', None)\n"
        "import numba\n"
        "import mgpu_helpers as mh\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    env = mh.setup(show=False, prewarm=False)\n"
        "print(env.numba_simulator, any('Restart the kernel' in str(x.message) for x in w))"
    )
    assert out.split() == ["False", "True"]


def test_setup_summary_names_mode_backend_and_cupy():
    out = _run("import os\nos.environ['MGPU_FORCE_CPU'] = '1'\nimport mgpu_helpers as mh\nmh.setup(prewarm=False)")
    assert "mode:     cpu" in out and "backend:  gloo" in out and "CuPy:" in out


@pytest.mark.parametrize(
    "world_size,gpus,want", [(4, 0, "gloo"), (2, 2, "nccl"), (4, 2, "gloo"), (1, 1, "nccl"), (8, 8, "nccl")]
)
def test_auto_backend_is_nccl_only_with_a_gpu_per_rank(world_size, gpus, want):
    backend, reason = hardware.choose_backend(world_size, "auto", gpu_count=gpus)
    assert backend == want and reason


def test_nccl_without_enough_gpus_says_what_to_do():
    with pytest.raises(ValueError, match=r"one GPU per rank: 4 ranks asked for, 2 GPU\(s\) here.*world_size <= 2"):
        hardware.choose_backend(4, "nccl", gpu_count=2)
    with pytest.raises(ValueError, match=r"0 GPU\(s\) here\. Use backend='gloo' \(ranks on the CPU\)\.$"):
        hardware.choose_backend(2, "nccl", gpu_count=0)


def test_cuda_visible_devices_limits_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert hardware._visible_indices(4) == [1, 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert hardware._visible_indices(4) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,7,1")  # CUDA stops at the first invalid entry
    assert hardware._visible_indices(2) == [0]
