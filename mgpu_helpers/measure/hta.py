"""HolisticTraceAnalysis (HTA) on the course's merged profiler traces: its communication/computation overlap.
Notebook 13's overlap (:func:`mgpu_helpers.lessons.overlap.overlap_fraction`) is, of the time each collective was
outstanding on the host, the share inside a backward span; HTA's is, of the time NCCL's kernels ran, the share
during which a compute kernel ran too. They agree where the backward keeps the GPU busy and a collective's kernel
runs the moment it is issued; an idle gap inside a backward, or a collective waiting for its peers or the stream
ahead, counts for the course and not for HTA. HTA reads GPU kernels only, and is optional (the ``test`` extra)."""

import json
import logging
import os
import tempfile
import warnings

from mgpu_helpers.measure.profile import ranks_of

INSTALL = "pip install holistictraceanalysis"


def has_gpu_kernels(merged: dict) -> bool:
    return any(e.get("cat") == "kernel" and e.get("ph") == "X" for e in merged.get("traceEvents", []))


def installed() -> bool:
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError:
        return False
    return True


def why_not(merged: dict) -> str | None:
    if not has_gpu_kernels(merged):
        return (
            "the trace has no GPU kernels (gloo communicates on the CPU): HTA's communication/computation "
            "overlap reads GPU kernels only"
        )
    return None if installed() else f"HolisticTraceAnalysis is not installed ({INSTALL})"


def write_rank_traces(merged: dict, folder: str) -> dict[int, str]:
    """``{rank: path}``: each rank's events in a file of its own, whose ``distributedInfo`` HTA reads the rank from."""
    ranks = ranks_of(merged)
    paths = {rank: os.path.join(folder, f"rank{rank}.json") for rank in ranks}
    for rank, path in paths.items():
        events = [e for e in merged["traceEvents"] if e.get("pid") == rank]
        trace = {"distributedInfo": {"rank": rank, "world_size": len(ranks)}, "traceEvents": events}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(trace, f)
    return paths


def comm_comp_overlap(merged: dict) -> dict[int, float]:
    """``{rank: HTA's overlap, 0 to 1}``; RuntimeError with :func:`why_not`'s line where HTA cannot read it."""
    if why := why_not(merged):
        raise RuntimeError(why)
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.common.trace import Trace

    # HTA logs each file it parses as a warning, and pandas 3 warns of HTA 0.5's calls: a notebook wants numbers.
    logger = logging.getLogger("hta")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="mgpu-hta-") as folder, warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"hta\.")
            trace = Trace(trace_files=write_rank_traces(merged, folder), trace_dir=folder)
            # What TraceAnalysis(trace_dir=folder) does, in one process: its pool of parsers would fork the
            # notebook's kernel for a few small files.
            trace.load_traces(use_multiprocessing=False)
            table = CommunicationAnalysis.get_comm_comp_overlap(trace, visualize=False)
    finally:
        logger.setLevel(level)
    # HTA returns the percentage, rounded to 0.01 %.
    return {int(r): float(x) / 100 for r, x in zip(table["rank"], table["comp_comm_overlap_pctg"])}
