"""Code that runs inside a rank process, under :func:`mgpu_helpers.run_ranks` or ``torchrun`` alike."""

import os
from datetime import timedelta


def rank_device():
    """The ``torch.device`` this rank computes on: its own GPU under NCCL, the CPU under gloo. Call it inside a
    rank function, after the process group is up (``run_ranks`` does that for you)."""
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def physical_cores(cpus=None) -> list[list[int]]:
    """The logical CPUs in ``cpus`` (default: those this process may use), grouped by physical core (Linux's
    ``/sys`` topology); where that is not readable, each logical CPU is its own group. Called only where the
    platform has CPU affinity (:func:`cpu_placement`)."""
    groups: dict = {}
    for cpu in sorted(os.sched_getaffinity(0) if cpus is None else cpus):
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topo + "physical_package_id") as package, open(topo + "core_id") as core:
                key = (package.read().strip(), core.read().strip())
        except OSError:
            key = ("cpu", cpu)
        groups.setdefault(key, []).append(cpu)
    return list(groups.values())


def cpu_placement(local_rank: int, local_world_size: int) -> list[int] | None:
    """The logical CPUs that CPU rank ``local_rank`` of ``local_world_size`` on this host is pinned to (None where the
    platform has no CPU affinity). A CPU rank stands in for a device, so its speed must follow its work, not where the
    scheduler puts it: with as many physical cores as ranks, each rank gets an equal run of cores to itself; with fewer,
    rank r shares core ``r % cores``. (Left to the scheduler, four ranks on two cores can end up three on one core and
    one on the other, and a rank with half the work then finishes last.)"""
    if not hasattr(os, "sched_setaffinity") or not 0 <= local_rank < local_world_size:
        return None
    cores = physical_cores()
    per_rank = len(cores) // local_world_size
    mine = cores[local_rank * per_rank : (local_rank + 1) * per_rank] if per_rank else [cores[local_rank % len(cores)]]
    return [cpu for core in mine for cpu in core]


def init_process_group(rank: int, world_size: int, backend: str, init_method: str, timeout_s: float = 1800.0) -> None:
    """Bind this rank to its GPU (NCCL) or size its CPU threads (gloo), then join the default group."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if backend == "nccl":
        # One GPU per rank: rank k on a host drives cuda:k. Set before init so NCCL picks that device.
        torch.cuda.set_device(local_rank)
        # CPU tensors still work: they go through gloo, so a rank function written for the CPU runs unchanged on a
        # GPU machine, and GPU tensors take NCCL.
        backend = "cpu:gloo,cuda:nccl"
    else:
        local_ws = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        cpus = cpu_placement(local_rank, local_ws)
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)  # before gloo and torch start their threads: they inherit it
            except OSError:
                cpus = None  # a container may forbid it: then the scheduler places the rank
        if "OMP_NUM_THREADS" not in os.environ:
            # Several CPU ranks share the cores: without this, each takes all of them and they thrash.
            threads = len(physical_cores(cpus)) if cpus else (os.cpu_count() or 1) // max(1, local_ws)
            torch.set_num_threads(max(1, threads))
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend=backend, init_method=init_method, world_size=world_size, rank=rank, timeout=timeout)


def torchrun_main(fn, *args, backend: str = "auto"):
    """Run ``fn(rank, world_size, *args)`` in a process started by ``torchrun`` (the launcher's README shows how) and
    return what it returns. Joins the default process group through ``env://`` and leaves it at the end: call it once
    per process."""
    import torch
    import torch.distributed as dist

    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError as missing:
        raise RuntimeError(
            f"{missing} is not set: torchrun_main() expects to be started by torchrun (e.g. `torchrun --standalone "
            "--nproc-per-node 2 script.py`). In a notebook use mgpu_helpers.run_ranks(fn, world_size) instead."
        ) from None
    local_ws = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if backend == "auto":  # NCCL when this host has a GPU for each local rank
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_ws else "gloo"
    init_process_group(rank, world_size, backend, "env://")  # LOCAL_RANK read there
    try:
        return fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
