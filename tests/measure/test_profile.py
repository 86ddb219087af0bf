"""torch.profiler traces of rank functions, merged into one Chrome trace with one process per rank."""

from __future__ import annotations

import json

import pytest

from mgpu_helpers.launcher import trace
from mgpu_helpers.measure import profile

SIZES = (1 << 10, 1 << 12, 1 << 14)


def three_all_reduces(rank, world_size):
    """Rank function: three all-reduces of growing size, each in a course span; rank 0 always enters first.

    Rank 0 says through the store that it is inside its k-th all-reduce range; only then does rank 1 finish
    its compute (20 ms more), so rank 0's range starts first whatever the load.
    """
    import time

    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher import trace as tr

    store = dist.distributed_c10d._get_default_store()
    dist.barrier()  # the profilers start at different times: line the ranks up first
    for k, nbytes in enumerate(SIZES):
        with tr.span("compute", f"compute {k}"):
            time.sleep(0.02)
            if rank > 0:
                store.wait([f"entered {k}"])
                time.sleep(0.02)
        x = torch.full((nbytes // 4,), float(rank + 1))
        with tr.span("communicate", f"all_reduce {k}"):
            if rank == 0:
                store.set(f"entered {k}", "1")
            dist.all_reduce(x)
        assert float(x[0]) == world_size * (world_size + 1) / 2
    return rank


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "three.trace.json"
    return profile.run_profiled(three_all_reduces, 2, str(path), backend="gloo", timeout=120)


def test_the_merged_trace_is_written_where_asked_with_one_named_process_per_rank(two_rank_run):
    run = two_rank_run
    assert run.results.values == [0, 1]
    with open(run.trace_path, encoding="utf-8") as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(run.trace))
    names = {
        e["pid"]: e["args"]["name"]
        for e in on_disk["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    assert names == {0: "rank 0", 1: "rank 1"}
    assert {e["pid"] for e in on_disk["traceEvents"]} == {0, 1}


def test_both_ranks_all_reduce_events_are_there_in_order_and_line_up_in_time(two_rank_run):
    merged = two_rank_run.trace
    per_rank = []
    for rank in (0, 1):
        ranges = profile.rank_events(merged, rank, r"^mgpu\.communicate:all_reduce \d$")
        assert [e["name"] for e in ranges] == [f"mgpu.communicate:all_reduce {k}" for k in range(3)]
        ops = [
            e
            for e in profile.rank_events(merged, rank, r"(?i)all_?reduce")
            if e.get("cat") in ("cpu_op", "user_annotation") and not e["name"].startswith("mgpu.")
        ]
        # each all-reduce shows as the profiler's own op, inside the course's range of that step
        for r in ranges:
            assert any(r["ts"] <= o["ts"] <= r["ts"] + r["dur"] for o in ops), (rank, r["name"])
        per_rank.append(ranges)
    for k in range(3):  # a collective ends for everyone together: the k-th ranges of both ranks overlap
        a, b = per_rank[0][k], per_rank[1][k]
        assert a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"], k
    # rank 1 finishes its compute only once rank 0 is inside its all-reduce: rank 0 enters first and waits
    assert all(per_rank[0][k]["ts"] < per_rank[1][k]["ts"] for k in range(3))


def test_spans_from_the_trace_are_the_runs_spans(two_rank_run):
    spans = profile.spans_from_trace(two_rank_run.trace)
    run_spans = two_rank_run.results.spans
    assert [[s.name for s in r] for r in spans] == [[s.name for s in r] for r in run_spans]
    for got, want in zip(spans, run_spans):
        for g, w in zip(got, want):
            assert g.kind == w.kind and abs(g.start - w.start) < 1e-5 and abs(g.end - w.end) < 1e-5


def test_the_straggler_timeline_draws_from_the_trace(two_rank_run):
    import matplotlib

    matplotlib.use("Agg")
    from mgpu_helpers.widgets import straggler

    fig = straggler.draw_timeline(profile.spans_from_trace(two_rank_run.trace), "from the trace")
    assert sum(len(c.get_paths()) for c in fig.axes[0].collections) == 12  # 2 ranks x 3 steps x (compute + comm.)


def test_clock_offset_needs_the_anchor():
    with pytest.raises(ValueError, match="mgpu:clock"):
        profile.clock_offset([{"ph": "X", "name": "x", "ts": 1.0, "dur": 1.0}], 0.0)
    evs = [
        {"ph": "X", "name": profile.ANCHOR, "ts": 100.0, "dur": 10.0},
        {"ph": "X", "name": profile.ANCHOR, "ts": 200.0, "dur": 2.0},
    ]
    assert profile.clock_offset(evs, 1000.0) == 1000.0 - 201.0


def test_spans_open_the_range_hook_and_the_hook_goes_away():
    opened = []
    from contextlib import contextmanager

    @contextmanager
    def hook(label):
        opened.append(label)
        yield

    trace.set_range_hook(hook)
    try:
        with trace.span("wait", "barrier"):
            pass
    finally:
        trace.set_range_hook(None)
    with trace.span("compute"):
        pass
    trace.collect()
    assert opened == ["mgpu.wait:barrier"]


def test_the_nvtx_range_is_a_range_hook_that_does_nothing_without_cuda(monkeypatch):
    """What a torchrun script under Nsight Systems sets: spans open NVTX ranges, and on a CPU nothing."""
    import torch

    pushed = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", pushed.append)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: pushed.append("pop"))
    trace.set_range_hook(profile.nvtx_range)
    try:
        with trace.span("communicate", "all_reduce"):
            pass
        with profile.nvtx_range("forced", on=True):
            pass
    finally:
        trace.set_range_hook(None)
    trace.collect()
    expected = ["mgpu.communicate:all_reduce", "pop"] if torch.cuda.is_available() else []
    assert pushed == expected + ["forced", "pop"]


def test_marked_range_shows_in_torch_profilers_trace_on_the_cpu(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for name in ("shard", "backward", "all_reduce", "step"):
            with profile.marked_range(name, torch.device("cpu")):
                torch.ones(8).sum()
        with profile.marked_range("default device"):  # no device given, CUDA not started: no NVTX
            pass
    path = tmp_path / "marks.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text(encoding="utf-8"))["traceEvents"]
    names = [e["name"] for e in sorted(events, key=lambda e: e.get("ts", 0)) if e.get("cat") == "user_annotation"]
    assert names == ["shard", "backward", "all_reduce", "step", "default device"]
