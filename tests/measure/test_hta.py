"""HolisticTraceAnalysis's overlap beside the course's own (measure/hta.py), on traces made here with GPU kernels.

Each rank's trace is written as torch.profiler writes one on a GPU (CPU ops on the process's pid, kernels on
``pid`` = device and ``tid`` = stream with ``args.stream``, the ``mgpu:clock`` anchor), then merged by
:func:`mgpu_helpers.measure.profile.merge_traces` with the course's spans: the file notebook 13 reads. The course
reads overlap from the spans (:func:`mgpu_helpers.lessons.overlap.overlap_fraction`); HTA reads the kernels.
"""

from __future__ import annotations

import pytest

from mgpu_helpers.launcher.trace import Span
from mgpu_helpers.lessons.overlap import overlap_fraction
from mgpu_helpers.measure import hta, profile

MS = 1000.0  # trace times are in microseconds
ANCHOR_US = 5_000_000.0  # the anchor's middle on time.monotonic(); the profiler's own clock starts near 0
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMPUTE_STREAM, NCCL_STREAM = 7, 20
# HTA rounds timestamps to whole microseconds; every kernel here lasts milliseconds.
TOLERANCE = 0.01


def _kernel(name: str, device: int, stream: int, start_ms: float, end_ms: float, correlation: int) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": start_ms * MS,
        "dur": (end_ms - start_ms) * MS,
        "args": {"device": device, "stream": stream, "correlation": correlation, "External id": correlation},
    }


def _rank_trace(device: int, cpu_pid: int, compute_ms, nccl_ms) -> dict:
    """A rank's raw trace: the clock anchor at profiler time 0 (so monotonic = profiler time + ANCHOR_US), a
    CPU launch op for each kernel, the kernels themselves, and the backward's range as torch.profiler projects a
    record_function range onto the GPU row (no ``stream`` in its args: HTA must not take it for a kernel)."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": profile.ANCHOR, "pid": cpu_pid, "tid": 1, "ts": -1, "dur": 2},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "mgpu.compute:backward 0", "pid": device,
         "tid": COMPUTE_STREAM, "ts": 0.0, "dur": 10 * MS, "args": {"External id": 999}},
    ]  # fmt: skip
    kernels = [("volta_sgemm_128x64_nn", COMPUTE_STREAM, *k) for k in compute_ms]
    kernels += [(NCCL, NCCL_STREAM, *k) for k in nccl_ms]
    for corr, (name, stream, start, end) in enumerate(kernels, start=1):
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": cpu_pid, "tid": 1,
             "ts": start * MS - 10, "dur": 5, "args": {"correlation": corr, "External id": corr}}
        )  # fmt: skip
        events.append(_kernel(name, device, stream, start, end, corr))
    return {"traceEvents": events}


def _spans(backward_ms, comm_ms) -> list[Span]:
    def sec(ms):
        return (ANCHOR_US + ms * MS) / 1e6

    return [Span("compute", f"backward {i}", sec(a), sec(b)) for i, (a, b) in enumerate(backward_ms)] + [
        Span("communicate", "all_reduce 4194304", sec(a), sec(b)) for a, b in comm_ms
    ]


# Both ranks: a backward from 0 to 10 ms, two all-reduces issued at 4 and 9 ms that run 4 ms each.
BACKWARD = [(0, 10)]
COMM = [(4, 8), (9, 13)]
# Rank 0's GPU computes throughout the backward; rank 1's is idle from 5 to 7 ms (the host between two layers).
COMPUTE = {0: [(0, 2.5), (2.5, 5), (5, 7.5), (7.5, 10)], 1: [(0, 2.5), (2.5, 5), (7, 10)]}


def _merged() -> dict:
    raw = [_rank_trace(rank, 900 + rank, COMPUTE[rank], COMM) for rank in (0, 1)]
    spans = [_spans(BACKWARD, COMM) for _ in (0, 1)]
    return profile.merge_traces(raw, [ANCHOR_US, ANCHOR_US], [900, 901], spans)


def test_the_rank_files_carry_distributed_info_and_the_kernels_stream():
    import json
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        paths = hta.write_rank_traces(_merged(), folder)
        assert sorted(paths) == [0, 1]
        for rank, path in paths.items():
            text = open(path).read()
            assert text.startswith(f'{{"distributedInfo": {{"rank": {rank}'), text[:80]
            kernels = [e for e in json.loads(text)["traceEvents"] if e.get("cat") == "kernel"]
            assert {e["args"]["stream"] for e in kernels} == {COMPUTE_STREAM, NCCL_STREAM}
        assert sorted(os.listdir(folder)) == ["rank0.json", "rank1.json"]


def test_hta_and_the_course_agree_where_the_gpu_computes_throughout_and_differ_by_its_idle_gap():
    pytest.importorskip("hta", reason=hta.INSTALL)
    merged = _merged()
    assert hta.why_not(merged) is None
    course = [overlap_fraction(spans) for spans in profile.spans_from_trace(merged)]
    by_hta = hta.comm_comp_overlap(merged)
    # The course: of 8 ms of collectives, 4 (4-8) + 1 (9-10) inside the backward, on both ranks.
    assert course == pytest.approx([5 / 8, 5 / 8])
    # Rank 0: the GPU computed all through the backward, so HTA's kernel overlap is the same 5 of 8 ms.
    assert by_hta[0] == pytest.approx(course[0], abs=TOLERANCE)
    # Rank 1: the GPU sat idle 5-7 ms inside the backward. The course still counts those 2 ms (the collective
    # was outstanding inside the backward's window on the host); HTA does not (no compute kernel ran beside
    # NCCL's): 3 of 8 ms.
    assert by_hta[1] == pytest.approx(3 / 8, abs=TOLERANCE)
    assert course[1] - by_hta[1] == pytest.approx(2 / 8, abs=TOLERANCE)


def test_a_cpu_trace_is_said_to_be_out_of_htas_reach_in_one_line():
    merged = _merged()
    merged["traceEvents"] = [e for e in merged["traceEvents"] if e.get("cat") != "kernel"]  # what gloo leaves
    why = hta.why_not(merged)
    assert "no GPU kernels" in why and "\n" not in why
    with pytest.raises(RuntimeError, match="no GPU kernels"):
        hta.comm_comp_overlap(merged)


def test_without_hta_installed_the_line_gives_the_pip_command(monkeypatch):
    monkeypatch.setattr(hta, "installed", lambda: False)
    assert hta.why_not(_merged()) == "HolisticTraceAnalysis is not installed (pip install holistictraceanalysis)"
