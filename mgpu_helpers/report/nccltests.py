"""The nccl-tests tables recorded on 2 x H200 (``data/nccltests_*.txt``, the unchanged output of ``*_perf``, whose
comment lines say where and how): look a size up, set a sweep beside them. Bandwidths are GB/s (1e9 bytes/s)."""

import re

from mgpu_helpers.models import bandwidth
from mgpu_helpers.report import recorded, sizes, tables

# size, count, type, redop, root, then time, algbw, busbw and the error count, out of place then in place
_TIMED = r"\s+([\d.]+)" * 3 + r"\s+(\S+)"
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)" + _TIMED * 2 + r"\s*$")
_TIMES = ("time_us", "algbw", "busbw", "inplace_time_us", "inplace_algbw", "inplace_busbw")


def parse_nccl_tests(text: str) -> list[dict]:
    """Rows of an nccl-tests ``*_perf`` output: ``nbytes, count, type, redop`` and the :data:`_TIMES`."""
    rows = []
    for m in filter(None, map(_ROW.match, text.splitlines())):  # a comment line starts with "#", never matches
        g = m.groups()  # g[4] is the root, g[8] and g[12] the error counts
        row = {"nbytes": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3]}
        rows.append(row | dict(zip(_TIMES, map(float, g[5:8] + g[9:12]))))
    return rows


def reference_header(op: str) -> list[str]:
    """The comment lines of the recorded reference for ``op``."""
    return [ln.rstrip() for ln in recorded.text(f"nccltests_{op}.txt").splitlines() if ln.startswith("#")]


def load_reference(op: str) -> list[dict]:
    """The recorded rows of ``op``; [] for one not recorded (rs_ag has no nccl-tests counterpart)."""
    name = f"nccltests_{op}.txt"
    return parse_nccl_tests(recorded.text(name)) if recorded.path(name).exists() else []


# Which nccl-tests column matches how mgpu_helpers.measure.sweep runs each op: all_reduce works in place on
# one buffer; reduce_scatter and all_gather read one buffer and write another (out of place).
REFERENCE_INPLACE = {"all_reduce": True, "reduce_scatter": False, "all_gather": False, "sendrecv": False}


def recorded_row(op: str, nbytes: int) -> dict | None:
    """The recorded row of ``op`` at exactly ``nbytes``, or None."""
    return next((r for r in load_reference(op) if r["nbytes"] == nbytes), None)


def reference_busbw(op: str, nbytes: int, inplace: bool | None = None) -> float | None:
    """Recorded busbw of ``op`` at ``nbytes`` or None; ``inplace`` default: as the sweep runs ``op``."""
    inplace = REFERENCE_INPLACE.get(op, False) if inplace is None else inplace
    r = recorded_row(op, nbytes)
    return None if r is None else r["inplace_busbw" if inplace else "busbw"]


def reference_curves(ops=("all_reduce", "reduce_scatter", "all_gather")) -> dict:
    """``{op: [(nbytes, busbw), ...]}`` from the recorded files, in the column the sweep matches."""
    return {op: [(r["nbytes"], reference_busbw(op, r["nbytes"])) for r in load_reference(op)] for op in ops}


def compare_with_reference(rows) -> list[dict]:
    """Each sweep row as a dict plus ``ref_busbw`` and ``ratio`` (ours / reference) where recorded. Only NCCL rows
    on 2 ranks are compared: the reference was measured so, and gloo on the CPU is another thing altogether."""
    out = []
    for d in map(tables.as_dict, rows):
        ref = reference_busbw(d["op"], d["nbytes"]) if d.get("world_size") == 2 and d.get("backend") == "nccl" else None
        ratio = d["busbw"] / ref if ref else None
        out.append(dict(d, ref_busbw=ref, ratio=ratio, size=sizes.format_bytes(d["nbytes"])))
    return out


SWEEP_COLUMNS = [("op", "op", "{}"), ("size", "size", "{}"), ("time_us", "time (us)", "{:.1f}")]
SWEEP_COLUMNS += [("algbw", "algbw (GB/s)", "{:.3f}"), ("busbw", "busbw (GB/s)", "{:.3f}")]
SWEEP_COLUMNS += [("ref_busbw", "nccl-tests busbw", "{:.2f}"), ("ratio", "ours / nccl-tests", "{:.2f}")]


def sweep_table(rows) -> str:
    """Sweep rows as a text table, with the recorded busbw and our share of it."""
    return tables.format_table(compare_with_reference(rows), SWEEP_COLUMNS)


def half_busbw_size(op: str = "all_reduce", inplace: bool | None = None) -> int:
    """The smallest recorded size whose busbw reaches half of the largest recorded busbw of ``op``."""
    curve = sorted((r["nbytes"], reference_busbw(op, r["nbytes"], inplace)) for r in load_reference(op))
    top = max(bw for _, bw in curve)
    return next(n for n, bw in curve if bw >= top / 2)


def recorded_split(nbytes: int = sizes.GiB, inplace: bool = False) -> dict:
    """Reduce-scatter then all-gather against one all-reduce of ``nbytes``, from one column of the recorded files:
    times (us), busbw, the sums and ratios, and ``launch_us``: the two launches' fixed cost (the smallest times)."""
    tkey, bkey = ("inplace_time_us", "inplace_busbw") if inplace else ("time_us", "busbw")
    ops = ("all_reduce", "reduce_scatter", "all_gather")
    got = {op: recorded_row(op, nbytes) for op in ops}
    if missing := [op for op, r in got.items() if r is None]:
        raise ValueError(
            f"no recorded row at {nbytes} bytes for {missing}; recorded sizes: "
            f"{[r['nbytes'] for r in load_reference('all_reduce')]}"
        )
    t = {op: r[tkey] for op, r in got.items()}
    rs_ag_us = t["reduce_scatter"] + t["all_gather"]
    rs_ag_busbw = bandwidth.busbw("all_reduce", nbytes, rs_ag_us / 1e6, 2) / 1e9
    launch_us = sum(min(r[tkey] for r in load_reference(op)) for op in ("reduce_scatter", "all_gather"))
    return (
        {"nbytes": nbytes, "inplace": inplace}
        | {f"{op}_us": t[op] for op in ops}
        | {f"{op}_busbw": got[op][bkey] for op in ops}
        | {"rs_ag_us": rs_ag_us, "rs_ag_busbw": rs_ag_busbw, "launch_us": launch_us}
        | {"time_ratio": rs_ag_us / t["all_reduce"], "busbw_ratio": rs_ag_busbw / got["all_reduce"][bkey]}
    )
