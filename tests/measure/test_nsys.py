"""09's Nsight Systems command, run for real where ``nsys`` and a GPU exist: the step's NVTX ranges are in the report.

09 marks ``shard``, ``backward``, ``all_reduce`` and ``step`` with :func:`mgpu_helpers.measure.profile.marked_range`
(NVTX on a GPU) and tells a learner with GPUs to run ``nsys profile --trace=cuda,nvtx,osrt ... torchrun ...
dp_step.py`` and then ``nsys stats --report nvtx_sum``. This test does exactly that on a small script; where
there is no ``nsys`` or no GPU it skips and says which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARKS = ("shard", "backward", "all_reduce", "step")

DP_STEP = """\
import mgpu_helpers as mh
from mgpu_helpers.lessons.data_parallel import train_data_parallel

if __name__ == "__main__":
    mh.torchrun_main(train_data_parallel, None, True)     # config=None (the default), trace_steps=True
"""


def _nsys() -> str:
    found = shutil.which("nsys")
    if not found:
        pytest.skip("nsys (Nsight Systems) is not installed on this machine: 09's profiling command is not tried")
    return found


def _gpus() -> int:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: NVTX ranges are only emitted on a GPU, so nsys would record none")
    return torch.cuda.device_count()


def test_the_lessons_dp_step_script_shows_its_four_nvtx_ranges_in_nsys_stats(tmp_path):
    nsys = _nsys()
    nproc = min(2, _gpus())
    script = tmp_path / "dp_step.py"
    script.write_text(DP_STEP, encoding="utf-8")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])), NCCL_NVLS_ENABLE="0"
    )
    report = tmp_path / "dp_step"
    profile = subprocess.run(
        [
            nsys,
            "profile",
            "--trace=cuda,nvtx,osrt",
            "--sample=none",
            "-o",
            str(report),
            "--force-overwrite=true",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            str(script),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert profile.returncode == 0, profile.stdout[-2000:] + profile.stderr[-2000:]
    rep = str(report) + ".nsys-rep"
    assert os.path.exists(rep), os.listdir(tmp_path)
    stats = None
    for name in ("nvtx_sum", "nvtxsum"):  # the report's name before Nsight Systems 2023.3
        stats = subprocess.run(
            [nsys, "stats", "--report", name, "--format", "csv", rep],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if stats.returncode == 0 and "Range" in stats.stdout:
            break
    assert stats.returncode == 0, stats.stderr[-2000:]
    rows = stats.stdout.splitlines()
    counts = {}
    for mark in MARKS:  # a row per range name: "...,:backward" (NVTX push/pop ranges get a ':' prefix)
        hits = [r for r in rows if r.rstrip().rstrip('"').endswith((f":{mark}", f",{mark}"))]
        assert hits, f"no NVTX range {mark!r} in nsys stats:\n" + stats.stdout[-3000:]
        counts[mark] = hits
    assert len(counts) == len(MARKS)
