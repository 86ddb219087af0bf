"""The lab report: Markdown with tables, and the figures as PNG files next to it.

    report = LabReport("All-Reduce lab")
    report.add_text("Setup", "2 ranks ...")
    report.add_table("Sweep", rows, [("op", "op", "{}"), ("nbytes", "bytes", "{:d}")])
    report.add_figure("Bandwidth", "busbw", fig, "busbw by message size")
    path = report.write(out_dir)        # out_dir/report.md + out_dir/busbw.png

``out_dir`` defaults to ``lab_reports/<timestamp>/`` under the current folder (lab_reports/ is ignored by
git); tests pass a temporary folder.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field


def default_dir(root: str | None = None) -> str:
    """``<root>/lab_reports/<YYYYmmdd-HHMMSS>`` (root: the current folder, or the repository root when
    run from notebooks/)."""
    if root is None:
        here = os.getcwd()
        root = os.path.dirname(here) if os.path.basename(here) == "notebooks" else here
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, "lab_reports", stamp)


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    try:
        text = fmt.format(value)
    except (ValueError, TypeError):
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows, columns) -> str:
    """A Markdown table. ``rows``: dicts; ``columns``: ``(key, header, format)`` triples, e.g.
    ``("busbw", "busbw (GB/s)", "{:.2f}")``. Missing or None values print as "-"."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    sep = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_cell(r.get(k), f) for k, _, f in columns) + " |" for r in rows]
    return "\n".join([head, sep] + body)


@dataclass
class LabReport:
    """A report built section by section, written as ``report.md`` plus one PNG per figure."""

    title: str
    sections: list = field(default_factory=list)     # (heading, markdown)
    figures: dict = field(default_factory=dict)      # file stem -> Figure

    def add_text(self, heading: str, text: str) -> None:
        self.sections.append((heading, text.strip()))

    def add_table(self, heading: str, rows, columns, note: str = "") -> None:
        text = markdown_table([r.as_dict() if hasattr(r, "as_dict") else r for r in rows], columns)
        self.sections.append((heading, (note.strip() + "\n\n" if note else "") + text))

    def add_code(self, heading: str, text: str) -> None:
        self.sections.append((heading, "```\n" + text.rstrip() + "\n```"))

    def add_figure(self, heading: str, name: str, fig, caption: str = "") -> None:
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"figure name must be letters, digits, - or _: {name!r}")
        self.figures[name] = fig
        self.sections.append((heading, f"![{caption or name}]({name}.png)" + (f"\n\n{caption}" if caption else "")))

    def markdown(self) -> str:
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        parts = [f"# {self.title}", f"_written {stamp}_"]
        for heading, text in self.sections:
            parts.append(f"## {heading}\n\n{text}")
        return "\n\n".join(parts) + "\n"

    def write(self, out_dir: str | None = None, dpi: int = 110) -> str:
        """Write ``report.md`` and the figures (PNG) into ``out_dir`` (created); returns the report's path."""
        out_dir = out_dir or default_dir()
        os.makedirs(out_dir, exist_ok=True)
        for name, fig in self.figures.items():
            fig.savefig(os.path.join(out_dir, f"{name}.png"), dpi=dpi, bbox_inches="tight")
        path = os.path.join(out_dir, "report.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.markdown())
        return path


# Column sets the lab uses.
SWEEP_COLUMNS = [("op", "op", "{}"), ("size", "size", "{}"), ("nbytes", "bytes", "{:d}"),
                 ("time_us", "time (us)", "{:.1f}"), ("algbw", "algbw (GB/s)", "{:.3f}"),
                 ("busbw", "busbw (GB/s)", "{:.3f}"), ("ref_busbw", "nccl-tests busbw (GB/s)", "{:.2f}"),
                 ("ratio", "ours / nccl-tests", "{:.2f}")]
STEP_COLUMNS = [("size", "all-reduce size", "{}"), ("compute_us", "compute (us)", "{:.0f}"),
                ("wait_us", "wait (us)", "{:.0f}"), ("comm_us", "all-reduce (us)", "{:.0f}"),
                ("efficiency", "compute share", "{:.0%}"), ("limited_by", "largest part", "{}")]
RANK_COLUMNS = [("rank", "rank", "{}"), ("device", "device", "{}"), ("input", "local input", "{}"),
                ("result", "all-reduce result", "{}"), ("ok", "correct", "{}")]
