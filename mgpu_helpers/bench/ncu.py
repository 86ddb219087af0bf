"""Nsight Compute figures of the course's vecAdd kernels: ``python -m mgpu_helpers.bench ncu [--n N] [--machine NAME]``.

``ncu`` profiles a child script that launches each kernel once, and its CSV becomes
``mgpu_helpers/data/ncu_<machine>.json`` (what notebook 02 shows). ``--clock-control none`` leaves the GPU's
clocks alone: ncu would otherwise lock them to base clocks, which the course machines do not allow.
"""

import csv
import datetime as _dt
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mgpu_helpers.bench import arguments, gpu_machine, kernels
from mgpu_helpers.report import recorded
from mgpu_helpers.report.tables import format_table as format_text_table

METRICS = {
    "launch__registers_per_thread": "registers_per_thread",
    "launch__block_size": "block_size",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
}
BLOCKS = kernels.BLOCKS  # the block sizes the kernels bench measures
ROW_FIELDS = ("block_size", "registers_per_thread", "achieved_occupancy_pct", "dram_throughput_pct")
NCU_COLUMNS = [("kernel", "kernel", "{}"), ("registers_per_thread", "regs/thread", "{}")]
NCU_COLUMNS += [("achieved_occupancy_pct", "achieved occupancy (%)", "{:.1f}")]
NCU_COLUMNS += [("dram_throughput_pct", "DRAM throughput (% of peak)", "{:.1f}")]
DATA_DIR = recorded.DATA_DIR  # where a new recording is written and the recorded ones are found (tests move it)
# The launches of the child script, in order: (label, kernel-name pattern, block size).
PLAN = [(f"Numba vec_add, block {b}", r"vec_add(?!_)", b) for b in BLOCKS] + [
    ("Numba vec_add_fast (4 per thread), block 256", r"vec_add_fast", 256),
    ("CuPy vecAddFast (float4), block 256", r"vecAddFast", 256),
]

CHILD = """
import sys
import numpy as np
from numba import cuda
from mgpu_helpers.lessons import cuda_model as CM, cupy_kernels as CK

n = int(sys.argv[1])
rng = np.random.default_rng(0)
h_a, h_b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
da, db, dc = cuda.to_device(h_a), cuda.to_device(h_b), cuda.device_array(n, dtype=np.float32)
for block in {blocks!r}:                      # one launch each: ncu profiles every launch it matches
    CM.vec_add[CM.launch_config(n, block)](da, db, dc, n)
    cuda.synchronize()
    assert np.array_equal(dc.copy_to_host(), h_a + h_b), block
CK.vec_add_fast_launch(da, db, dc, block=256)
cuda.synchronize()
assert np.array_equal(dc.copy_to_host(), h_a + h_b), "vec_add_fast"
try:
    import cupy as cp
except ImportError:
    print("no CuPy: the CuPy kernel is left out")
else:
    ca, cb = cp.asarray(h_a), cp.asarray(h_b)
    cc = CK.vec_add_cupy_fast(ca, cb, block=256)
    cp.cuda.Device().synchronize()
    assert np.array_equal(cp.asnumpy(cc), h_a + h_b), "vecAddFast"
"""


def find_ncu() -> str | None:
    return shutil.which("ncu") or shutil.which("ncu", path="/usr/local/cuda/bin")


def ncu_version(ncu: str) -> str:
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"Version\s+([\d.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def command(ncu: str, script: str, n: int) -> list[str]:
    options = ["--clock-control", "none", "--csv", "--print-units", "base", "--kernel-name", "regex:vec_add|vecAdd"]
    return [ncu, *options, "--metrics", ",".join(METRICS), sys.executable, script, str(n)]


def parse_csv(text: str) -> list[dict]:
    """One dict per profiled launch, in launch order, from ncu's ``--csv`` "details" page (one line per launch and
    metric; ncu's ``==PROF==`` lines and the script's output skipped). ``block_size``: the metric, else x·y·z."""
    if not (lines := [ln for ln in text.splitlines() if ln.startswith('"')]):
        raise ValueError("no CSV lines in ncu's output: was it run with --csv, and did it profile a kernel?")
    reader = csv.DictReader(lines)
    need = {"ID", "Kernel Name", "Metric Name", "Metric Value"}
    if not need <= set(reader.fieldnames or ()):
        raise ValueError(f"ncu CSV without the columns {sorted(need)}: got {reader.fieldnames}")
    launches: dict[int, dict] = {}
    for row in reader:
        launch = launches.setdefault(int(row["ID"]), {"id": int(row["ID"]), "kernel": row["Kernel Name"]})
        dims = [int(d) for d in re.findall(r"\d+", row.get("Block Size") or "")]
        if dims and "block_size" not in launch:
            launch["block_size"] = math.prod(dims[:3])  # x * y * z
        if key := METRICS.get(row["Metric Name"]):
            value = float(row["Metric Value"].replace(",", "").strip())
            launch[key] = int(value) if key in ("registers_per_thread", "block_size") else value
    return [launches[k] for k in sorted(launches)]


def label_rows(launches: list[dict], plan=PLAN) -> list[dict]:
    """Each launch named after the child script's plan, checking kernel name and block size agree."""
    out, queue = [], list(plan)
    for launch in launches:
        match = next((p for p in queue if re.search(p[1], launch["kernel"]) and p[2] == launch.get("block_size")), None)
        if match is None:
            what = f"launch {launch['id']} ({launch['kernel'][:60]}, block {launch.get('block_size')})"
            raise ValueError(f"{what} is not one the child script makes")
        queue.remove(match)
        out.append({"kernel": match[0], **{k: launch.get(k) for k in ROW_FIELDS}})
    return out


def machine_name(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'h200'."""
    return re.sub(r"[^a-z0-9]+", "_", gpu_name.lower().replace("nvidia", "")).strip("_") or "gpu"


def path_for(machine: str) -> str:
    return os.path.join(DATA_DIR, f"ncu_{machine}.json")


def load(machine: str | None = None) -> dict:
    """A recorded table; ``machine`` None: the first ``ncu_*.json`` by name."""
    if machine is None:
        found = sorted(f for f in os.listdir(DATA_DIR) if f.startswith("ncu_") and f.endswith(".json"))
        if not found:
            how = "run `python -m mgpu_helpers.bench ncu` on a machine with an NVIDIA GPU and ncu"
            raise FileNotFoundError(f"no Nsight Compute figures recorded: {how}")
        machine = found[0][len("ncu_") : -len(".json")]
    return json.loads(Path(path_for(machine)).read_text(encoding="utf-8"))


def format_table(record: dict) -> str:
    version = record["ncu_version"] if re.match(r"\d", record["ncu_version"]) else f"({record['ncu_version']})"
    head = f"Nsight Compute {version} on {record['gpu']} ({record['machine']}), {record['date']}, N = {record['n']} float32"
    partial = [f"partial record: {record['source']}"] if record.get("partial") else []
    return "\n".join([head, *partial, format_text_table(record["rows"], NCU_COLUMNS)])


def main(argv: list[str]) -> int:
    p = arguments("ncu", __doc__)
    p.add_argument("--n", type=int, default=1 << 24, help="elements per vector (default 2**24)")
    p.add_argument("--machine", default=None, help="name in the file name (default: from the GPU's name)")
    p.add_argument("--out", default=None, help="where to write the JSON (default mgpu_helpers/data/ncu_<machine>.json)")
    p.add_argument("--show", action="store_true", help="print the recorded table(s) and exit")
    a = p.parse_args(argv)
    if a.show:
        print(format_table(load(a.machine)))
        return 0
    if (ncu := find_ncu()) is None:
        why = "ncu (Nsight Compute) is not installed here: it comes with the CUDA toolkit (/usr/local/cuda/bin/ncu)."
        print(why, "The recorded figures: python -m mgpu_helpers.bench ncu --show", file=sys.stderr)
        return 1
    if (m := gpu_machine("ncu")) is None:
        return 1
    with tempfile.TemporaryDirectory(prefix="mgpu-ncu-") as tmp:
        script = os.path.join(tmp, "vecadd_child.py")
        Path(script).write_text(CHILD.format(blocks=BLOCKS))
        root = os.path.dirname(os.path.dirname(DATA_DIR))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        cmd = command(ncu, script, a.n)
        print("+", " ".join(cmd), flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], f"ncu exited with {out.returncode}", sep="\n", file=sys.stderr)
        return 1
    rows, gpu = label_rows(parse_csv(out.stdout)), m.gpus[0].name
    machine = a.machine or machine_name(gpu)
    record = dict(machine=machine, gpu=gpu, date=_dt.date.today().isoformat(), ncu_version=ncu_version(ncu), n=a.n)
    command_line = " ".join(["ncu"] + cmd[1:-3] + ["python", "vecadd_child.py", str(a.n)])
    record |= dict(command=command_line, source="python -m mgpu_helpers.bench ncu", rows=rows)
    path = a.out or path_for(machine)
    Path(path).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(format_table(record), f"written to {path}", sep="\n")
    return 0
