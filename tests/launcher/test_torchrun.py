"""The same rank function runs unchanged under torchrun, the engine for several machines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from launcher_procs import ROOT

import mgpu_helpers as mh
from mgpu_helpers.bench.launch import allreduce_rank


def test_same_rank_function_runs_under_run_ranks_and_torchrun(tmp_path):
    script = tmp_path / "allreduce.py"
    script.write_text(
        textwrap.dedent("""
        import os

        import mgpu_helpers as mh
        from mgpu_helpers.bench.launch import allreduce_rank

        def scaled(rank, world_size, k):
            return k * allreduce_rank(rank, world_size)

        if __name__ == "__main__":
            # Both ranks write to one pipe: one short os.write is atomic, while print() may split a line
            # into several writes (unbuffered stdout) that interleave with the other rank's.
            os.write(1, f"result {mh.torchrun_main(scaled, 10)}\\n".encode())
    """)
    )
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    env = dict(os.environ, PYTHONPATH=ROOT, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = sorted(line for line in out.stdout.splitlines() if line.startswith("result"))
    assert results == ["result 10", "result 10"]
    sys.path.insert(0, str(tmp_path))
    try:
        from allreduce import scaled  # the very function torchrun ran, now launched from a "cell"

        assert mh.run_ranks(scaled, 2, args=(10,), quiet=True).values == [10, 10]
    finally:
        sys.path.remove(str(tmp_path))


def test_torchrun_main_outside_torchrun_says_what_to_do(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(RuntimeError, match="started by torchrun"):
        mh.torchrun_main(allreduce_rank)
