"""HolisticTraceAnalysis (HTA) on the course's profiler traces: its communication/computation overlap per rank.

Notebook 13 reads overlap from the course's spans (:func:`mgpu_helpers.lessons.overlap.overlap_fraction`): of the
time each collective was outstanding on the host, from its issue to its completion, the share that falls inside
a backward span. HTA's ``get_comm_comp_overlap`` reads the GPU instead: of the time NCCL's kernels ran, the share
during which a compute kernel ran too. The two agree where the backward keeps the GPU busy throughout and a
collective's kernel runs the moment it is issued; they differ by what the GPU did (an idle gap inside a backward
counts for the course, not for HTA) and by what a collective waited for before its kernel began (its peers,
the stream ahead of it: the course counts that wait, HTA does not).

HTA reads GPU kernels only: on the CPU (gloo) the traces have none, and :func:`why_not` says so. It is optional
(``pip install holistictraceanalysis``, in the ``test`` extra); :func:`why_not` says that too, in one line.

The traces are the ones :func:`mgpu_helpers.measure.profile.run_profiled` merged: :func:`write_rank_traces` writes
each rank's events back into a file of its own with the ``distributedInfo`` that HTA reads the rank from.
"""

import json
import logging
import os
import tempfile
import warnings
from contextlib import contextmanager

from mgpu_helpers.measure.profile import ranks_of

INSTALL = "pip install holistictraceanalysis"


def has_gpu_kernels(merged: dict) -> bool:
    """Whether the trace holds GPU kernels: events of category "kernel" (torch.profiler's CUDA activity)."""
    return any(e.get("cat") == "kernel" and e.get("ph") == "X" for e in merged.get("traceEvents", []))


def installed() -> bool:
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError:
        return False
    return True


def why_not(merged: dict) -> str | None:
    """One line saying why HTA cannot read ``merged``'s overlap here, or None when it can."""
    if not has_gpu_kernels(merged):
        return (
            "the trace has no GPU kernels (gloo communicates on the CPU): HTA's communication/computation "
            "overlap reads GPU kernels only"
        )
    if not installed():
        return f"HolisticTraceAnalysis is not installed ({INSTALL})"
    return None


def write_rank_traces(merged: dict, folder: str) -> dict[int, str]:
    """Each rank's events of the merged trace (``pid`` = rank) as a Chrome trace file of its own in ``folder``,
    with ``distributedInfo`` first (HTA finds the rank by the first ``"rank": N`` in the file). Returns
    ``{rank: path}``. The events are the merged trace's own, on its clock: HTA reads GPU kernels by their
    ``args.stream``, which merging keeps."""
    ranks = ranks_of(merged)
    paths = {}
    for rank in ranks:
        path = os.path.join(folder, f"rank{rank}.json")
        trace = {
            "distributedInfo": {"rank": rank, "world_size": len(ranks)},
            "traceEvents": [e for e in merged["traceEvents"] if e.get("pid") == rank],
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(trace, f)
        paths[rank] = path
    return paths


@contextmanager
def _hta_quiet():
    """HTA logs each file it parses as a warning, and pandas 3 warns of the calls HTA 0.5 makes: a notebook
    wants only the numbers."""
    logger = logging.getLogger("hta")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"hta\.")
            yield
    finally:
        logger.setLevel(level)


def comm_comp_overlap(merged: dict) -> dict[int, float]:
    """HTA's communication/computation overlap of each rank of ``merged``, as a fraction (0 to 1): of the time
    NCCL kernels ran on the rank's GPU, the share during which a compute kernel ran. Raises RuntimeError with
    :func:`why_not`'s line where HTA cannot read it."""
    why = why_not(merged)
    if why:
        raise RuntimeError(why)
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.common.trace import Trace

    with tempfile.TemporaryDirectory(prefix="mgpu-hta-") as folder, _hta_quiet():
        trace = Trace(trace_files=write_rank_traces(merged, folder), trace_dir=folder)
        # What TraceAnalysis(trace_dir=folder) does, in one process: its pool of parsers would fork the
        # notebook's kernel for a few small files.
        trace.load_traces(use_multiprocessing=False)
        table = CommunicationAnalysis.get_comm_comp_overlap(trace, visualize=False)
    # HTA returns the percentage, rounded to 0.01 %.
    return {int(r): float(x) / 100 for r, x in zip(table["rank"], table["comp_comm_overlap_pctg"])}
