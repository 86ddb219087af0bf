"""The text of the two GPU-failure recordings, written by ``bench gpu_failures`` and read by notebooks 01 and 03,
in one place so that writer and reader cannot drift apart. Pure text, no torch: read on machines without a GPU.
Both start with three lines, ``# <title>``, ``# machine: ...``, ``# command: ...``. Then ``async_error_<gpu>.txt``
has ``=== script`` and, per run (``=== default``, ``=== blocking``), ``--- exit code: N``, ``--- stdout`` and
``--- stderr`` sections; ``one_gpu_per_rank_<gpu>.txt`` a table (one row per GPU a process appears on, ``-``
where NVML gave no figure), NVML's process list, and an ``=== nccl`` section."""

import dataclasses
import re
import subprocess
from pathlib import Path

from mgpu_helpers.report import recorded

ASYNC_ERROR = "async_error"  # the file names' stems
ONE_GPU_PER_RANK = "one_gpu_per_rank"
PREFERRED_GPU = "h200"  # the recording the notebooks read where several GPUs have one
RUNS = ("default", "blocking")  # the async script's two runs, in the file's order
CROWD_COLUMNS = "rank pid current_device gpu context_only_MiB after_alloc_MiB"
NCCL_SECTION = "nccl"


@dataclasses.dataclass(frozen=True)
class Header:
    title: str
    machine: str
    command: str

    def lines(self) -> list[str]:
        return [f"# {self.title}", f"# machine: {self.machine}", f"# command: {self.command}"]

    @classmethod
    def parse(cls, lines: list[str]) -> "Header":
        if len(lines) < 3 or not all(ln.startswith("# ") for ln in lines[:3]):
            raise ValueError("a recording starts with three '# ' lines: title, machine, command")
        for line, key in zip(lines[1:3], ("machine", "command"), strict=True):
            if not line.startswith(prefix := f"# {key}: "):
                raise ValueError(f"expected a line starting {prefix!r}, got {line!r}")
        return cls(lines[0][2:], *(line.split(": ", 1)[1] for line in lines[1:3]))


def file_name(stem: str, gpu: str) -> str:
    return f"{stem}_{gpu}.txt"


def find(stem: str, data_dir: Path | None = None) -> Path:
    """The H200's recording where there is one, else the first by name; where none is, the H200's (missing) path."""
    data_dir = Path(data_dir or recorded.DATA_DIR)
    preferred = data_dir / file_name(stem, PREFERRED_GPU)
    found = sorted(data_dir.glob(file_name(stem, "*")))
    return preferred if preferred.is_file() or not found else found[0]


@dataclasses.dataclass(frozen=True)
class AsyncErrorRecord:
    header: Header
    script: str
    runs: dict[str, subprocess.CompletedProcess]  # "default", "blocking": exit code, stdout and stderr of each


def format_async_error(record: AsyncErrorRecord) -> str:
    # Outputs go in as lines: the next marker starts a line of its own whether or not an output ended with a newline.
    lines = record.header.lines() + ["=== script", *record.script.splitlines()]
    for name in RUNS:
        run = record.runs[name]
        lines += [f"=== {name}", f"--- exit code: {run.returncode}", "--- stdout", *run.stdout.splitlines()]
        lines += ["--- stderr", *run.stderr.splitlines()]
    return "\n".join(lines) + "\n"


def _sections(text: str, marker: str) -> dict[str, str]:
    """``{name: the lines after it, as text}`` for each line ``<marker>name``; the text before the first is ignored."""
    parts = re.split(rf"^{re.escape(marker)}(.*)\n?", text, flags=re.M)  # [before, name, text, name, text, ...]
    return {name.strip(): body for name, body in zip(parts[1::2], parts[2::2])}


def parse_async_error(text: str) -> AsyncErrorRecord:
    header = Header.parse(text.splitlines())
    sections = _sections(text, "=== ")
    if missing := {"script", *RUNS} - set(sections):
        raise ValueError(f"the recording has no section(s) {sorted(missing)}: it has {sorted(sections)}")
    runs = {}
    for name in RUNS:
        parts = _sections(sections[name], "--- ")
        code = next((k for k in parts if k.startswith("exit code: ")), None)
        if code is None or "stdout" not in parts or "stderr" not in parts:
            raise ValueError(f"the {name!r} run needs '--- exit code: N', '--- stdout' and '--- stderr' lines")
        returncode = int(code.split(":")[1])  # the child's command line is not recorded: args None
        runs[name] = subprocess.CompletedProcess(None, returncode, parts["stdout"], parts["stderr"])
    return AsyncErrorRecord(header, sections["script"], runs)


def read_async_error(path: Path) -> AsyncErrorRecord:
    return parse_async_error(Path(path).read_text(encoding="utf-8"))


@dataclasses.dataclass(frozen=True)
class CrowdRow:
    """One process on one GPU; the MiB are None where NVML gave no figure (a container may hide its processes)."""

    rank: int
    pid: int
    current_device: int
    gpu: int
    context_only_mib: int | None
    after_alloc_mib: int | None


@dataclasses.dataclass(frozen=True)
class CrowdRecord:
    header: Header
    rows: list[CrowdRow]
    nvml: str  # every process NVML listed, ours or not: what to look at when the table is empty
    nccl: str  # the two NCCL ranks' answers, one line each (or why they did not run)


def format_crowd(record: CrowdRecord) -> str:
    lines = record.header.lines() + [CROWD_COLUMNS]
    for row in record.rows:  # every column in order, "-" where NVML gave no figure
        lines.append(" ".join("-" if v is None else str(v) for v in dataclasses.astuple(row)))
    lines += [f"# NVML's processes (gpu pid context-only/after MiB): {record.nvml}", f"=== {NCCL_SECTION}"]
    return "\n".join(lines + record.nccl.splitlines()) + "\n"


def parse_crowd(text: str) -> CrowdRecord:
    lines = text.splitlines()
    header = Header.parse(lines)
    if CROWD_COLUMNS not in lines:
        raise ValueError(f"the recording has no table: no line {CROWD_COLUMNS!r}")
    start = lines.index(CROWD_COLUMNS) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(("#", "==="))), len(lines))
    rows = []
    for line in lines[start:end]:
        rank, pid, current, gpu, context, after = line.split()
        mib = [None if word == "-" else int(word) for word in (context, after)]
        rows.append(CrowdRow(int(rank), int(pid), int(current), int(gpu), *mib))
    nvml = ([ln.split(": ", 1)[1] for ln in lines[end:] if ln.startswith("# NVML's processes")] or [""])[-1]
    sections = _sections(text, "=== ")
    if NCCL_SECTION not in sections:
        raise ValueError(f"the recording has no '=== {NCCL_SECTION}' section")
    return CrowdRecord(header, rows, nvml, sections[NCCL_SECTION])


def read_crowd(path: Path) -> CrowdRecord:
    return parse_crowd(Path(path).read_text(encoding="utf-8"))
