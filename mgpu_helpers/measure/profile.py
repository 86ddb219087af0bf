"""Real profiler traces of rank functions: ``torch.profiler`` on every rank (CUDA activity too on a GPU, so NCCL's
kernels appear on their stream; the course's spans as ``record_function`` ranges), merged into one Perfetto file of
one process per rank, every timestamp on ``time.monotonic()``: the course spans' clock, one for every process of
the machine. For Nsight Systems under torchrun, ``trace.set_range_hook(profile.nvtx_range)`` shows the spans as
NVTX ranges (mgpu_helpers/launcher/README.md, "Profiling")."""

import json
import os
import re
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mgpu_helpers.launcher import trace
from mgpu_helpers.launcher.launch import run_ranks

SPAN_CATEGORY = "mgpu_span"
SPAN_TID = 1  # the "course spans" track of each rank
GPU_TID_BASE = 1_000_000_000  # GPU streams become threads of their rank: base + device * 10**6 + stream
ANCHOR = "mgpu:clock"


@dataclass
class ProfiledRun:
    """The launch's results (values = ``fn``'s) and the merged trace."""

    results: object
    trace_path: str
    trace: dict


def _anchor() -> float:
    """Open a few empty ``mgpu:clock`` ranges and return time.monotonic() (us) at the middle of the last one:
    :func:`clock_offset` finds that range in the trace and so maps the profiler's clock onto monotonic."""
    from torch.profiler import record_function

    mid = 0.0
    for _ in range(3):  # the first range pays one-off costs; the last is short
        t0 = time.monotonic()
        with record_function(ANCHOR):
            pass
        mid = (t0 + time.monotonic()) / 2 * 1e6
    return mid


def profiled(fn, trace_dir: str, cuda: str = "auto"):
    """A rank function running ``fn`` under torch.profiler; ``cuda="auto"``: CUDA activity where it has a GPU."""

    def profiled_rank(rank, world_size, *args):
        import torch
        from torch.profiler import ProfilerActivity, profile

        from mgpu_helpers.launcher.ranks import rank_device

        gpu = rank_device().type == "cuda" if cuda == "auto" else bool(cuda)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
        trace.set_range_hook(marked_range)  # a torch.profiler range, and NVTX when CUDA is up
        try:
            with profile(activities=activities) as prof:
                anchor_us = _anchor()
                value = fn(rank, world_size, *args)
                if gpu:
                    torch.cuda.synchronize()
        finally:
            trace.set_range_hook(None)
        path = os.path.join(trace_dir, f"rank{rank}.json")
        prof.export_chrome_trace(path)
        return {"value": value, "trace_file": path, "anchor_us": anchor_us, "pid": os.getpid()}

    profiled_rank.__name__ = getattr(fn, "__name__", "rank_fn")
    return profiled_rank


def clock_offset(events, anchor_us: float) -> float:
    """Microseconds that put this trace's timestamps on time.monotonic(), from the last ``mgpu:clock`` range."""
    if not (anchors := [e for e in events if e.get("name") == ANCHOR and e.get("ph") == "X"]):
        raise ValueError(f"no {ANCHOR!r} range in the trace: was it recorded by profile.profiled()?")
    last = max(anchors, key=lambda e: float(e["ts"]))
    return anchor_us - (float(last["ts"]) + float(last.get("dur", 0)) / 2)


def _new_tid(event, cpu_pid) -> int | None:
    pid, tid = event.get("pid"), event.get("tid")
    if pid == cpu_pid:
        return tid if isinstance(tid, int) else None
    if isinstance(pid, int) and isinstance(tid, int):  # a GPU: pid = device, tid = stream
        return GPU_TID_BASE + pid * 1_000_000 + tid
    return None  # the profiler's own "Spans"/"Traces" rows


def merge_traces(rank_traces, anchors_us, cpu_pids, spans_per_rank=None) -> dict:
    """One Chrome trace: ``pid`` = rank, timestamps on time.monotonic() (us), GPU streams as threads of their rank,
    and ``spans_per_rank`` as complete events on the "course spans" thread."""
    out = []
    for rank, (tr, anchor_us, cpu_pid) in enumerate(zip(rank_traces, anchors_us, cpu_pids)):
        events = tr.get("traceEvents", [])
        shift, named = clock_offset(events, anchor_us), set()
        out += [
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": SPAN_TID, "args": {"name": "course spans"}},
        ]
        for e in events:
            tid = _new_tid(e, cpu_pid)
            if tid is None or e.get("name") in ("process_name", "process_labels", "process_sort_index"):
                continue
            e = dict(e, pid=rank, tid=tid)
            if e.get("ph") == "M":
                if e.get("name") == "thread_name" and tid >= GPU_TID_BASE:
                    device, stream = divmod(tid - GPU_TID_BASE, 1_000_000)
                    e["args"] = {"name": f"GPU {device} stream {stream}"}
                if (e.get("name"), tid) in named:
                    continue
                named.add((e.get("name"), tid))
                e.pop("ts", None)
            elif "ts" in e:
                e["ts"] = float(e["ts"]) + shift
            out.append(e)
        out += [
            {"ph": "X", "cat": SPAN_CATEGORY, "name": s.name, "pid": rank, "tid": SPAN_TID, "ts": s.start * 1e6}
            | {"dur": max(s.seconds, 0.0) * 1e6, "args": {"kind": s.kind}}
            for s in (spans_per_rank[rank] if spans_per_rank else [])
        ]
    clock = {"clock": "time.monotonic() in microseconds", "ranks": len(rank_traces)}
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": clock}


def rank_events(merged: dict, rank: int, pattern: str = "", category: str | None = None) -> list[dict]:
    """Complete events of ``rank`` whose name matches ``pattern`` (a regular expression), in time order."""
    rx, events = re.compile(pattern), merged["traceEvents"]
    evs = [e for e in events if e.get("ph") == "X" and e.get("pid") == rank and rx.search(str(e.get("name", "")))]
    return sorted((e for e in evs if category is None or e.get("cat") == category), key=lambda e: e["ts"])


def ranks_of(merged: dict) -> list[int]:
    return sorted({e["pid"] for e in merged["traceEvents"] if isinstance(e.get("pid"), int)})


def spans_from_trace(merged: dict) -> list[list[trace.Span]]:
    """Per rank, the course's spans in the merged trace, as Span lists (what ``draw_timeline`` takes)."""
    span = lambda e: trace.Span(e["args"]["kind"], e["name"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
    return [[span(e) for e in rank_events(merged, r, category=SPAN_CATEGORY)] for r in ranks_of(merged)]


def run_profiled(
    fn, world_size: int, trace_path: str | None = None, args=(), cuda: str = "auto", **run_ranks_kwargs
) -> ProfiledRun:
    """Run ``fn`` on ranks under torch.profiler and write the merged trace to ``trace_path`` (default
    ``<fn name>.trace.json`` in the current folder: beside the notebook, which Jupyter runs in its folder)."""
    trace_path = os.path.abspath(trace_path or f"{getattr(fn, '__name__', 'ranks')}.trace.json")
    run_ranks_kwargs.setdefault("stream", False)
    with tempfile.TemporaryDirectory(prefix="mgpu-profile-") as tmp:
        res = run_ranks(profiled(fn, tmp, cuda), world_size, args=tuple(args), **run_ranks_kwargs)
        raw = [json.loads(Path(v["trace_file"]).read_text(encoding="utf-8")) for v in res.values]
    merged = merge_traces(raw, [v["anchor_us"] for v in res.values], [v["pid"] for v in res.values], res.spans)
    os.makedirs(os.path.dirname(trace_path), exist_ok=True)
    Path(trace_path).write_text(json.dumps(merged), encoding="utf-8")
    res.values = [v["value"] for v in res.values]
    return ProfiledRun(res, trace_path, merged)


@contextmanager
def nvtx_range(label: str, on: bool | None = None):
    """An NVTX range when ``on`` (by default when CUDA is available); else nothing."""
    import torch

    on = torch.cuda.is_available() if on is None else on
    if on:
        torch.cuda.nvtx.range_push(label)
    try:
        yield
    finally:
        if on:
            torch.cuda.nvtx.range_pop()


@contextmanager
def marked_range(label: str, device=None):
    """A named range of a step as the field's tools show it: NVTX on a CUDA ``device`` (by default when CUDA is
    initialised) for Nsight Systems, and ``record_function`` for torch.profiler. Next to free when neither runs."""
    import torch
    from torch.autograd.profiler import record_function

    cuda_up = torch.cuda.is_available() and torch.cuda.is_initialized()
    gpu = torch.device(device).type == "cuda" if device is not None else cuda_up
    with torch.cuda.nvtx.range(label) if gpu else nullcontext(), record_function(label):
        yield
