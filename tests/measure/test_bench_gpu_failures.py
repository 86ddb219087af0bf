"""``python -m mgpu_helpers.bench gpu_failures``: the two files it writes, read back by the reader notebooks 01 and 03
use (bench/failure_records.py), with the GPU runs replaced by fakes; and its refusal on a machine without a GPU."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import mgpu_helpers as mh

mh.setup(show=False, prewarm=False)  # before lessons.cuda_model imports numba: the simulator on in CPU mode
from mgpu_helpers.bench import failure_records as fr  # noqa: E402
from mgpu_helpers.bench import gpu_failures  # noqa: E402
from mgpu_helpers.lessons.cuda_model import ASYNC_CHILD, raised_at  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HINT = "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."


def child_stderr(line: int) -> str:
    """A traceback as PyTorch prints it, pointing at ``line`` of async_child.py."""
    source = ASYNC_CHILD.splitlines()[line - 1]
    return (
        "../aten/src/ATen/native/cuda/IndexKernel.cu:111: block: [0,0,0], thread: [1,0,0] Assertion "
        '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n'
        "Traceback (most recent call last):\n"
        f'  File "/tmp/tmpx1/async_child.py", line {line}, in <module>\n'
        f"    {source.strip()}\n"
        "torch.AcceleratorError: CUDA error: device-side assert triggered\n"
        f"{HINT}\n"
    )


RUNS = {  # blocking -> the finished child
    False: SimpleNamespace(returncode=1, stdout="the host went on past the bad index\n", stderr=child_stderr(8)),
    True: SimpleNamespace(returncode=1, stdout="", stderr=child_stderr(5)),
}
SEEN = [(0, 101, 0), (1, 102, 0), (2, 103, 0)]  # (rank, pid, current device)
CONTEXT_ONLY = {0: {101: 518, 102: 518, 103: 518, 999: 4000}, 1: {}}  # 999: a process that is not ours
AFTER_ALLOC = {0: {101: 774, 102: 774, 103: 774, 999: 4000}, 1: {}}
NCCL = "rank 0: DistBackendError: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0\nrank 1: DistBackendError: ...\n"


def record(tmp_path: Path, seen=SEEN) -> list[Path]:
    return gpu_failures.record(
        tmp_path,
        "h999",
        header_for=lambda title: fr.Header(
            title, "NVIDIA H999 x 2, node; torch 9.9, CUDA 99.0; date 2026-12-05", "cmd"
        ),
        run_child=RUNS.__getitem__,
        crowd=lambda ranks: (seen[:ranks], CONTEXT_ONLY, AFTER_ALLOC),
        nccl_pair=lambda: NCCL,
        ranks=3,
    )


def test_both_files_are_written_under_the_names_the_notebooks_look_for(tmp_path):
    written = record(tmp_path)
    assert [p.name for p in written] == ["async_error_h999.txt", "one_gpu_per_rank_h999.txt"]
    assert fr.find(fr.ASYNC_ERROR, tmp_path) == written[0]
    assert fr.find(fr.ONE_GPU_PER_RANK, tmp_path) == written[1]


def test_the_async_error_file_reads_back_as_01_uses_it(tmp_path):
    rec = fr.read_async_error(record(tmp_path)[0])
    assert rec.header.machine.startswith("NVIDIA H999 x 2") and rec.header.command == "cmd"
    assert "CUDA_LAUNCH_BLOCKING=1" in rec.header.title
    assert rec.script == ASYNC_CHILD  # 01's hidden test: the recording is of its own script
    for blocking, name in ((False, "default"), (True, "blocking")):
        run = rec.runs[name]
        assert (run.returncode, run.stdout, run.stderr) == (1, RUNS[blocking].stdout, RUNS[blocking].stderr)
    # what 01's reading cell computes from it
    assert raised_at(rec.runs["default"].stderr) == (8, "total = float(w[-1])")
    assert raised_at(rec.runs["blocking"].stderr)[0] == 5


def test_the_crowd_file_reads_back_as_03_uses_it(tmp_path):
    rec = fr.read_crowd(record(tmp_path)[1])
    assert rec.header.machine.startswith("NVIDIA H999") and "3 processes" in rec.header.title
    assert rec.rows == [fr.CrowdRow(r, pid, 0, 0, 518, 774) for r, pid, _ in SEEN]
    assert "0 999 4000/4000" in rec.nvml  # every process NVML listed, ours or not
    assert rec.nccl == NCCL


def test_a_process_nvml_does_not_list_gets_a_row_without_figures(tmp_path):
    hidden = [*SEEN, (3, 104, 0)]  # in a container NVML may list host pids: 104 is nowhere
    rec = fr.read_crowd(
        gpu_failures.record(
            tmp_path,
            "x",
            lambda t: fr.Header(t, "m", "c"),
            RUNS.__getitem__,
            lambda ranks: (hidden, CONTEXT_ONLY, AFTER_ALLOC),
            lambda: "",
            4,
        )[1]
    )
    assert rec.rows[-1] == fr.CrowdRow(3, 104, 0, 0, None, None)
    assert rec.nccl == ""


def test_a_process_on_two_gpus_has_a_row_on_each():
    rows, _ = gpu_failures.crowd_rows([(0, 7, 0)], {0: {7: 500}, 1: {7: 300}}, {0: {7: 756}, 1: {7: 300}})
    assert [(r.gpu, r.context_only_mib, r.after_alloc_mib) for r in rows] == [(0, 500, 756), (1, 300, 300)]


class FakeQueue:
    """The answers that have come; then empty, as a queue whose writers have gone quiet."""

    def __init__(self, answers):
        self.answers = list(answers)

    def get(self, timeout):
        if not self.answers:
            raise queue.Empty
        return self.answers.pop(0)


def test_a_process_that_ends_without_answering_stops_the_wait_and_is_named():
    procs = [SimpleNamespace(exitcode=0), SimpleNamespace(exitcode=-11)]
    assert gpu_failures._answers(FakeQueue([(0, "ok"), (1, "ok")]), procs, 60) == ([(0, "ok"), (1, "ok")], None)
    got, problem = gpu_failures._answers(FakeQueue([(0, "ok")]), procs, 60)
    assert got == [(0, "ok")] and problem == "ended without an answer (rank, exit code): (1, -11)"
    got, problem = gpu_failures._answers(FakeQueue([]), [SimpleNamespace(exitcode=None)], 0)
    assert got == [] and "a hang" in problem


def test_find_prefers_the_h200_recording_and_names_it_when_there_is_none(tmp_path):
    assert fr.find(fr.ASYNC_ERROR, tmp_path) == tmp_path / "async_error_h200.txt"  # not there yet
    (tmp_path / "async_error_h100.txt").write_text("x")
    assert fr.find(fr.ASYNC_ERROR, tmp_path).name == "async_error_h100.txt"
    (tmp_path / "async_error_h200.txt").write_text("x")
    assert fr.find(fr.ASYNC_ERROR, tmp_path).name == "async_error_h200.txt"


def test_a_file_without_its_sections_is_refused_by_name():
    head = "# t\n# machine: m\n# command: c\n"
    with pytest.raises(ValueError, match="blocking"):
        fr.parse_async_error(head + "=== script\nx\n=== default\n--- exit code: 1\n--- stdout\n--- stderr\n")
    with pytest.raises(ValueError, match="machine"):
        fr.parse_crowd("# t\n# host: m\n# command: c\n")


def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, MGPU_FORCE_CPU="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "mgpu_helpers.bench", "gpu_failures", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "needs an NVIDIA GPU" in done.stderr
    assert not out.exists()


def test_the_recordings_the_course_ships_are_of_its_own_scripts_and_show_what_01_and_03_teach():
    errors = fr.read_async_error(fr.find(fr.ASYNC_ERROR))
    assert errors.script == ASYNC_CHILD
    assert raised_at(errors.runs["blocking"].stderr)[0] == 5  # the bad index itself
    assert raised_at(errors.runs["default"].stderr)[0] > 5  # a later line: the error came back late
    assert all("device-side assert" in run.stderr and run.returncode != 0 for run in errors.runs.values())
    crowd = fr.read_crowd(fr.find(fr.ONE_GPU_PER_RANK))
    assert len(crowd.rows) >= 2 and {(row.current_device, row.gpu) for row in crowd.rows} == {(0, 0)}
    assert len({row.pid for row in crowd.rows}) == len(crowd.rows)  # one process per rank, all on GPU 0
