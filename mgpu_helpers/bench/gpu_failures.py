"""Record two GPU failures that notebooks 01 and 03 show on machines without a GPU (bench/README.md says what):
``python -m mgpu_helpers.bench gpu_failures [--out DIR] [--ranks N] [--gpu NAME]``. Needs an NVIDIA GPU.
"""

import contextlib
import datetime as _dt
import multiprocessing as mp
import os
import platform
import queue
import tempfile
import time
from pathlib import Path

from mgpu_helpers.bench import arguments, gpu_machine
from mgpu_helpers.bench import failure_records as fr
from mgpu_helpers.bench.ncu import machine_name
from mgpu_helpers.report import recorded

ALLOC_MIB = 256
NCCL_TIMEOUT_S = 60
SPAWN = mp.get_context("spawn")  # fresh interpreters: nothing inherited from this process's CUDA state


def machine_line(gpu_name: str, gpu_count: int) -> str:
    """Read without initialising CUDA here: NVML would list this process's context."""
    import torch

    versions, now = f"torch {torch.__version__}, CUDA {torch.version.cuda}", _dt.datetime.now(_dt.UTC)
    return f"{gpu_name} x {gpu_count}, {platform.node()}; {versions}; date {now:%Y-%m-%d %H:%M} UTC"


def nvml_processes() -> dict[int, dict[int, int | None]]:
    """``{gpu: {pid: MiB or None}}`` of every compute process NVML lists."""
    import pynvml

    pynvml.nvmlInit()
    try:
        out = {}
        for gpu in range(pynvml.nvmlDeviceGetCount()):
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(gpu))
            out[gpu] = {p.pid: None if p.usedGpuMemory is None else p.usedGpuMemory // 2**20 for p in procs}
        return out
    finally:
        pynvml.nvmlShutdown()


def _crowd_worker(rank, barrier, answers):
    """Use CUDA without set_device, then allocate ALLOC_MIB, waiting after each while the parent reads NVML."""
    import torch

    torch.zeros(1, device="cuda")
    answers.put((rank, os.getpid(), torch.cuda.current_device()))
    barrier.wait()  # context only: the parent reads NVML
    barrier.wait()
    held = torch.empty(ALLOC_MIB * 2**20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    barrier.wait()  # + ALLOC_MIB: the parent reads NVML again
    barrier.wait()
    del held


def _answers(answers, procs, timeout_s: float) -> tuple[list, str | None]:
    """One answer ``(rank, ...)`` from each of ``procs``, and what went wrong where not all came: a process that
    ended without answering stops the wait at once rather than at ``timeout_s``."""
    got, deadline, ended = [], time.monotonic() + timeout_s, False
    while len(got) < len(procs):
        with contextlib.suppress(queue.Empty):
            got.append(answers.get(timeout=1))
            continue
        answered = {answer[0] for answer in got}
        silent = [(rank, p.exitcode) for rank, p in enumerate(procs) if rank not in answered and p.exitcode is not None]
        if silent and ended:  # ended before the last wait too: its answer would have come by now
            return got, "ended without an answer (rank, exit code): " + ", ".join(map(str, silent))
        ended = bool(silent)
        if time.monotonic() > deadline:
            return got, f"no answer from {len(procs) - len(got)} process(es) within {timeout_s:.0f} s: a hang"
    return got, None


def _started(target, args_per_rank) -> list:
    procs = [SPAWN.Process(target=target, args=args) for args in args_per_rank]
    for p in procs:
        p.start()
    return procs


def _ended(procs, wait_s: float) -> None:
    for p in procs:
        p.join(wait_s)
        if p.is_alive():
            p.kill()


def run_crowd(ranks: int) -> tuple[list[tuple[int, int, int]], dict, dict]:
    """``([(rank, pid, current device)], NVML's processes with contexts only, and after the allocations)``."""
    barrier, answers = SPAWN.Barrier(ranks + 1, timeout=180), SPAWN.Queue()
    procs = _started(_crowd_worker, [(r, barrier, answers) for r in range(ranks)])
    try:
        seen, problem = _answers(answers, procs, 180)
        if problem:
            raise RuntimeError(f"the processes using CUDA without set_device: {problem}")
        snapshots = []
        for _ in range(2):  # with contexts only, then after the allocations
            barrier.wait()
            time.sleep(1)  # NVML's per-process figures lag the allocation a little
            snapshots.append(nvml_processes())
            barrier.wait()
    except BaseException:
        barrier.abort()  # the processes waiting at it stop at once
        raise
    finally:
        _ended(procs, 30)
    return sorted(seen), *snapshots


def crowd_rows(seen, context_only: dict, after_alloc: dict) -> tuple[list[fr.CrowdRow], str]:
    """One row per GPU a process appears on in NVML (without figures where a container hides it); NVML's list."""
    gpus = sorted(set(context_only) | set(after_alloc))
    before, after = ({g: snap.get(g, {}) for g in gpus} for snap in (context_only, after_alloc))
    pids = {g: sorted(set(before[g]) | set(after[g])) for g in gpus}
    rows = []
    for rank, pid, current in seen:  # where NVML lists it nowhere, one row on its current device, without figures
        on = [fr.CrowdRow(rank, pid, current, g, before[g].get(pid), after[g].get(pid)) for g in gpus if pid in pids[g]]
        rows += on or [fr.CrowdRow(rank, pid, current, current, None, None)]
    listed = [f"{g} {pid} {before[g].get(pid, '-')}/{after[g].get(pid, '-')}" for g in gpus for pid in pids[g]]
    return rows, "; ".join(listed) or "none"


def _nccl_worker(rank, store_path, answers):
    import torch
    import torch.distributed as dist

    try:
        store, timeout = dist.FileStore(store_path, 2), _dt.timedelta(seconds=30)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=2, timeout=timeout)
        x = torch.ones(4, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        answers.put((rank, "ok", str(x.tolist())))
        dist.destroy_process_group()
    except Exception as exc:  # what NCCL says is the recording
        answers.put((rank, type(exc).__name__, str(exc)[:1500]))


def run_nccl_pair(gpu_count: int) -> str:
    """What two NCCL ranks without set_device give back, one line a rank, or why they did not run."""
    if gpu_count < 2:
        return f"not run: two NCCL ranks on one machine need 2 GPUs, this one has {gpu_count}\n"
    answers = SPAWN.Queue()
    with tempfile.TemporaryDirectory(prefix="mgpu-nccl-") as tmp:
        procs = _started(_nccl_worker, [(r, os.path.join(tmp, "store"), answers) for r in range(2)])
        got, problem = _answers(answers, procs, NCCL_TIMEOUT_S)  # a crash or a hang is a finding too
        _ended(procs, 5)
    lines = [problem] if problem else []
    lines += [f"rank {rank}: {kind}: {what}".replace("\n", " | ") for rank, kind, what in sorted(got)]
    return "\n".join(lines) + "\n"


def record(out_dir: Path, gpu: str, header_for, run_child, crowd, nccl_pair, ranks: int) -> list[Path]:
    """Write both files into ``out_dir``; the GPU work comes in as functions, so a test can pass fakes."""
    from mgpu_helpers.lessons.cuda_model import ASYNC_CHILD

    title = "PyTorch out-of-bounds index on the GPU, run in fresh processes: plainly, then with CUDA_LAUNCH_BLOCKING=1"
    runs = {name: run_child(blocking) for name, blocking in zip(fr.RUNS, (False, True), strict=True)}
    async_text = fr.format_async_error(fr.AsyncErrorRecord(header_for(title), ASYNC_CHILD, runs))
    rows, nvml = crowd_rows(*crowd(ranks))
    title = (
        f"One GPU per rank: {ranks} processes use CUDA without torch.cuda.set_device (torch.zeros(1) for the "
        f"context, then {ALLOC_MIB} MiB); per-process GPU memory from NVML; then 2 NCCL ranks without set_device"
    )
    crowd_text = fr.format_crowd(fr.CrowdRecord(header_for(title), rows, nvml, nccl_pair()))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = [Path(out_dir) / fr.file_name(stem, gpu) for stem in (fr.ASYNC_ERROR, fr.ONE_GPU_PER_RANK)]
    for path, text in zip(written, (async_text, crowd_text)):
        path.write_text(text, encoding="utf-8")
    return written


def main(argv: list[str]) -> int:
    p = arguments("gpu_failures", __doc__)
    p.add_argument("--out", type=Path, default=None, help="folder for the two files (default: mgpu_helpers/data)")
    p.add_argument("--ranks", type=int, default=4, help="processes that skip set_device (default 4)")
    p.add_argument("--gpu", default=None, help="the files' GPU name, e.g. h200 (default: from the GPU's name)")
    a = p.parse_args(argv)
    if (m := gpu_machine("gpu_failures")) is None:
        return 1
    from mgpu_helpers.lessons.cuda_model import run_async_child

    command = " ".join([p.prog, *argv])
    machine = machine_line(m.gpus[0].name, len(m.gpus))
    header_for = lambda title: fr.Header(title, machine, command)
    gpu = a.gpu or machine_name(m.gpus[0].name)
    nccl_pair = lambda: run_nccl_pair(len(m.gpus))
    for path in record(a.out or recorded.DATA_DIR, gpu, header_for, run_async_child, run_crowd, nccl_pair, a.ranks):
        print(path.read_text(encoding="utf-8"), f"written to {path}\n", sep="\n")
    return 0
