"""The lab report: Markdown with tables, and the figures as PNG files next to it. :func:`build_report` puts
notebook 12's results together: what the learner measured and concluded; the report writes no conclusion itself."""

import datetime as _dt
import os
from dataclasses import dataclass, field

from mgpu_helpers.report import nccltests, sizes, tables


def default_dir(root: str | None = None) -> str:
    """``<root>/lab_reports/<YYYYmmdd-HHMMSS>`` (git-ignored; root: the current folder, or the repository root
    when run from notebooks/, solutions/ or exercises/)."""
    if root is None:
        here = os.getcwd()
        inside = os.path.basename(here) in ("notebooks", "solutions", "exercises")
        root = os.path.dirname(here) if inside else here
    return os.path.join(root, "lab_reports", _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))


@dataclass
class LabReport:
    title: str
    sections: list = field(default_factory=list)  # (heading, markdown)
    figures: dict = field(default_factory=dict)  # file stem -> Figure

    def add_text(self, heading: str, text: str) -> None:
        self.sections.append((heading, text.strip()))

    def add_table(self, heading: str, rows, columns, note: str = "") -> None:
        self.sections.append((heading, (note.strip() + "\n\n" if note else "") + tables.markdown_table(rows, columns)))

    def add_figure(self, heading: str, name: str, fig, caption: str = "") -> None:
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"figure name must be letters, digits, - or _: {name!r}")
        self.figures[name] = fig
        self.sections.append((heading, f"![{caption or name}]({name}.png)" + (f"\n\n{caption}" if caption else "")))

    def markdown(self) -> str:
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        parts = [f"# {self.title}", f"_written {stamp}_"] + [f"## {h}\n\n{t}" for h, t in self.sections]
        return "\n\n".join(parts) + "\n"

    def write(self, out_dir: str | None = None) -> str:
        """Write ``report.md`` and the figures (PNG) into ``out_dir`` (created); returns the report's path."""
        out_dir = out_dir or default_dir()
        os.makedirs(out_dir, exist_ok=True)
        for name, fig in self.figures.items():
            fig.savefig(os.path.join(out_dir, f"{name}.png"), dpi=110, bbox_inches="tight")
        path = os.path.join(out_dir, "report.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.markdown())
        return path


# The mark of the lab's placeholder text: a conclusion that still holds it is not the learner's.
PLACEHOLDER = "✎"

# The sweep's text-table columns: nccltests' own, with the size in bytes added and the reference's unit written out.
_NCCLTESTS = {column[0]: column for column in nccltests.SWEEP_COLUMNS}
SWEEP_COLUMNS = [_NCCLTESTS["op"], _NCCLTESTS["size"], ("nbytes", "bytes", "{:d}")]
SWEEP_COLUMNS += [_NCCLTESTS[key] for key in ("time_us", "algbw", "busbw")]
SWEEP_COLUMNS += [("ref_busbw", "nccl-tests busbw (GB/s)", "{:.2f}"), _NCCLTESTS["ratio"]]
STEP_COLUMNS = [("size", "all-reduce size", "{}"), ("compute_us", "compute (us)", "{:.0f}")]
STEP_COLUMNS += [("wait_us", "wait (us)", "{:.0f}"), ("comm_us", "all-reduce (us)", "{:.0f}")]
STEP_COLUMNS += [("efficiency", "compute share", "{:.0%}"), ("limited_by", "largest part", "{}")]
RANK_COLUMNS = [("rank", "rank", "{}"), ("device", "device", "{}"), ("shard", "shard [start, stop)", "{}")]
RANK_COLUMNS += [("local", "local result", "{:.0f}"), ("result", "all-reduce result", "{:.0f}")]
RANK_COLUMNS += [("expected", "expected", "{:.0f}"), ("ok", "correct", "{}")]
CLAIM_COLUMNS = [("claim", "结论", "{}"), ("verdict", "测量是否支持", "{}"), ("evidence", "依据", "{}")]


def build_report(title, setup, topology, rank_rows, sweep_rows, step_rows, compare, review, conclusion, figures):
    """The lab report from the lab's results, all plain data (``compare``: ``{"rows": [...], "note": str}``;
    ``review``: verdicts of :func:`mgpu_helpers.checks.lab.review_conclusions`; ``figures``: name -> (caption, fig))."""
    if conclusion is None or not str(conclusion).strip() or PLACEHOLDER in str(conclusion):
        raise ValueError(
            "the report needs the learner's own conclusion: my_conclusion is still None or the "
            f"placeholder (it holds {PLACEHOLDER!r}); write it in your own words first"
        )
    report = LabReport(title)
    report.add_text("环境", setup)
    report.add_text("拓扑摘要", f"```\n{topology.rstrip()}\n```")
    report.add_table("逐 Rank 输出", [dict(r, ok="yes" if r.get("ok") else "NO") for r in rank_rows], RANK_COLUMNS)
    note = "algbw = bytes / time；busbw 按 nccl-tests 公式（All-Reduce x 2(n-1)/n，"
    note += "Reduce-Scatter / All-Gather x (n-1)/n，RS+AG 按 All-Reduce 计）。"
    heading = "消息规模扫描（All-Reduce / Reduce-Scatter / All-Gather / RS+AG）"
    report.add_table(heading, sweep_rows, SWEEP_COLUMNS, note=note)
    steps = [dict(r, size=sizes.format_bytes(r["nbytes"])) for r in step_rows]
    report.add_table("一步的时间拆分：计算 / 等待 / All-Reduce", steps, STEP_COLUMNS)
    heads = {"approach": "做法", "result": "每个 Rank 得到", "buffer": "通信 Buffer / Rank", "time": "时间"}
    columns = [(key, head, "{}") for key, head in heads.items()]
    heading = "All-Reduce 与 Reduce-Scatter + All-Gather"
    report.add_table(heading, compare["rows"], columns, note=compare.get("note", ""))
    for name, (caption, fig) in figures.items():
        report.add_figure(caption, name, fig, caption)
    report.add_table("我的结论，逐条对照测量", [v.as_dict() for v in review], CLAIM_COLUMNS)
    report.add_text("结论：一步的时间输在哪里", conclusion)
    return report


def lab_run(step_rows, wait_us, rounds, sweep_rows, peak_GBps, world_size: int) -> dict:
    """Everything one run of the lab measured that its conclusions are checked against, as plain data."""
    return {
        "step_rows": [dict(r) for r in step_rows],
        "wait_us": [list(w) for w in wait_us],
        "rounds": [dict(r) for r in rounds],
        "sweep_rows": [tables.as_dict(r) for r in sweep_rows],
        "peak_GBps": peak_GBps,
        "world_size": world_size,
    }
