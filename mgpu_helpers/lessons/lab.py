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
RANK_COLUMNS = [("rank", "rank", "{}"), ("device", "device", "{}"), ("shard", "shard [start, stop)", "{}"),
                ("input", "local input", "{}"), ("local", "local result", "{:.0f}"),
                ("result", "all-reduce result", "{:.0f}"), ("ok", "correct", "{}")]


# --------------------------------------------------------------------------------------------------------
# The lab's rank function and helpers.

def ownership_check(rank: int, world_size: int, n: int = 16) -> dict:
    """Rank function, lab steps 1-2: own a shard, compute locally, all-reduce, check on every rank.

    The global input is ``0, 1, ..., n-1`` (float64); rank r owns its contiguous shard, computes the local
    result ``sum(x**2)`` over it, and all-reduces it. On a GPU the all-reduce runs on a side stream and the
    compute stream waits on its event before reading the buffer (see
    :func:`mgpu_helpers.lessons.dataparallel.allreduce_gradients`); on the CPU ``work.wait()`` blocks.
    Returns ``{rank, device, shard: (start, stop), input: list, local, result, expected, ok}``.
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.lessons.dataparallel import shard, shard_range
    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    data = torch.arange(n, dtype=torch.float64)
    mine = shard(data, rank, world_size).to(device)
    local = (mine ** 2).sum().reshape(1)
    buf = local.clone()
    if device.type == "cuda":
        compute = torch.cuda.current_stream(device)
        comm = torch.cuda.Stream(device)
        comm.wait_stream(compute)
        with torch.cuda.stream(comm):
            buf.record_stream(comm)
            work = dist.all_reduce(buf, async_op=True)
            work.wait()
            done = torch.cuda.Event()
            done.record(comm)
        compute.wait_event(done)
    else:
        dist.all_reduce(buf, async_op=True).wait()
    expected = float((data ** 2).sum())
    r = shard_range(n, rank, world_size)
    result = float(buf.item())
    return {"rank": rank, "device": str(device), "shard": (r.start, r.stop),
            "input": [int(v) for v in mine.tolist()], "local": float(local.item()), "result": result,
            "expected": expected, "ok": result == expected}


def progress_bar(description: str = "sweep"):
    """A progress callback ``update(done, total)``: an ipywidgets IntProgress when ipywidgets is there,
    else a text bar printed on one line."""
    try:
        import ipywidgets as W
        from IPython.display import display
    except ImportError:
        W = None
    if W is not None:
        bar = W.IntProgress(value=0, min=0, max=1, description=description)
        label = W.Label("")
        display(W.HBox([bar, label]))

        def update(done, total):
            bar.max = max(total, 1)
            bar.value = done
            label.value = f"{done}/{total}"
        return update

    def text_update(done, total):
        width = 30
        filled = int(width * done / max(total, 1))
        end = "\n" if done >= total else ""
        print(f"\r{description} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, flush=True)
    return text_update


def build_report(title: str, setup: str, topology: str, rank_rows, sweep_rows, step_rows, compare: dict,
                 conclusions, figures: dict) -> LabReport:
    """The lab report from the lab's results (all plain data, so tests can build one without ranks).

    ``rank_rows``: :func:`ownership_check` results; ``sweep_rows``: SweepRows; ``step_rows``:
    :func:`mgpu_helpers.measure.sweep.combine_steps` rows; ``compare``: ``{"rows": [...], "note": str}`` for
    all-reduce vs reduce-scatter + all-gather; ``conclusions``: sentences; ``figures``: ``{name: (caption,
    Figure)}``, saved as PNG next to the report.
    """
    from mgpu_helpers.measure.sweep import compare_with_reference, format_bytes

    report = LabReport(title)
    report.add_text("环境", setup)
    report.add_code("拓扑摘要", topology)
    report.add_table("逐 Rank 输出", [dict(r, input=" ".join(map(str, r["input"])), ok="yes" if r["ok"] else "NO")
                                     for r in rank_rows], RANK_COLUMNS)
    report.add_table("消息规模扫描（All-Reduce / Reduce-Scatter / All-Gather / RS+AG）",
                     [dict(d, size=format_bytes(d["nbytes"])) for d in compare_with_reference(sweep_rows)],
                     SWEEP_COLUMNS,
                     note="algbw = bytes / time；busbw 按 nccl-tests 公式（All-Reduce x 2(n-1)/n，"
                          "Reduce-Scatter / All-Gather x (n-1)/n，RS+AG 按 All-Reduce 计）。")
    report.add_table("一步的时间拆分：计算 / 等待 / All-Reduce",
                     [dict(r, size=format_bytes(r["nbytes"])) for r in step_rows], STEP_COLUMNS)
    report.add_table("All-Reduce 与 Reduce-Scatter + All-Gather", compare["rows"],
                     [("approach", "做法", "{}"), ("result", "每个 Rank 得到", "{}"),
                      ("buffer", "通信 Buffer / Rank", "{}"), ("time", "时间", "{}")], note=compare.get("note", ""))
    for name, (caption, fig) in figures.items():
        report.add_figure(caption, name, fig, caption)
    report.add_text("结论：扩展效率受限于哪一段", "\n".join(f"- {c}" for c in conclusions))
    return report


def conclude(step_rows, sweep_rows, world_size: int) -> list[str]:
    """Sentences (Chinese, for the report) on what limits scaling efficiency, read from the measurements:
    the weak-scaling efficiency per size, where the all-reduce overtakes the compute, how much is waiting,
    the alpha-beta fit of the all-reduce, and all-reduce against reduce-scatter + all-gather."""
    from mgpu_helpers.models import perfmodel
    from mgpu_helpers.measure.sweep import format_bytes

    out = []
    effs = [(r["nbytes"], perfmodel.weak_scaling_efficiency(r["compute_us"], r["step_us"])) for r in step_rows]
    out.append("弱扩展效率（每个 Rank 计算量不变，t1 = 单 Rank 只计算，tn = 计算 + 等待 + All-Reduce）："
               + "，".join(f"{format_bytes(n)} {e:.0%}" for n, e in effs) + "。")
    over = [r for r in step_rows if r["comm_us"] > r["compute_us"]]
    if over:
        sizes = "、".join(format_bytes(r["nbytes"]) for r in over)
        out.append(f"在 {sizes} 上，All-Reduce 比局部计算还长：这些规模下扩展效率受限于通信段。")
    else:
        out.append("在测到的所有规模上，局部计算都比 All-Reduce 长：扩展效率主要受计算段（和等待）限制。")
    worst_wait = max(step_rows, key=lambda r: r["wait_us"] / r["step_us"])
    share = worst_wait["wait_us"] / worst_wait["step_us"]
    out.append(f"等待占一步的比例最高为 {share:.0%}（{format_bytes(worst_wait['nbytes'])}）"
               + ("：Rank 到达同步点的时间明显不齐，应先查 Straggler。" if share > 0.2 else "：Rank 之间基本均衡。"))
    ar = sorted((r.nbytes, r.time_us / 1e6) for r in sweep_rows if r.op == "all_reduce")
    if world_size >= 2 and len({n for n, _ in ar}) >= 2:
        alpha, beta = perfmodel.fit_alpha_beta("all_reduce", [n for n, _ in ar], [t for _, t in ar], world_size,
                                               relative=True)
        bw = f"{1 / beta / 1e9:.2f} GB/s" if beta > 0 else "（无法估计）"
        out.append(f"All-Reduce 的 alpha-beta 拟合：每步延迟 α ≈ {alpha * 1e6:.1f} us，链路带宽 1/β ≈ {bw}；"
                   "小消息受延迟限制，大消息受带宽限制。")
    pairs = {}
    for r in sweep_rows:
        pairs.setdefault(r.nbytes, {})[r.op] = r.time_us
    both = [(n, d["rs_ag"] / d["all_reduce"]) for n, d in sorted(pairs.items()) if "rs_ag" in d and "all_reduce" in d]
    if both:
        n, ratio = both[-1]
        out.append(f"最大规模 {format_bytes(n)} 上，Reduce-Scatter + All-Gather 的时间是一次 All-Reduce 的 {ratio:.2f} 倍。")
    out.append("这些结论只对本机、本次测到的规模成立；不要从一个规模外推到其它规模或其它拓扑。")
    return out
