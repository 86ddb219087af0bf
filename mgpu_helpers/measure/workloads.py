"""Rank functions shared by the notebooks: real, traced work whose cost is known in advance. They run unchanged on
gloo CPU ranks and NCCL GPU ranks; only the default sizes depend on the device."""

import statistics
import time

from mgpu_helpers.launcher import trace
from mgpu_helpers.launcher.ranks import rank_device
from mgpu_helpers.measure.timing import synchronize_device, time_batch

# Matrix size and matmuls per unit of shard, by device type: one unit costs a few ms on either.
CPU_SIZES = dict(m=128, per_unit=80)
GPU_SIZES = dict(m=4096, per_unit=4)
PHASE_KEYS = {"compute": "compute_s", "wait": "wait_s", "communicate": "comm_s"}  # a phase's key in a step's results


def compute_units(units: float, device, m: int | None = None, per_unit: int | None = None, seed: int = 0):
    """``units`` units of work on ``device`` (one unit: ``per_unit`` m x m matmuls); a small tensor summarising it."""
    import torch

    if device.type == "cpu":
        # One thread per rank: a CPU rank stands in for one device, and its cost must not depend on how
        # many threads the launcher gave it (several threads per rank on a busy machine spin and thrash).
        torch.set_num_threads(1)
    sizes = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    m, per_unit = m or sizes["m"], per_unit or sizes["per_unit"]
    # A constant matrix made on the device: no host-side set-up cost inside the timed span. Rows sum
    # to 0.5, so y <- a @ y + 1 stays bounded (no overflow, no denormals). ``seed`` shifts the start.
    a = torch.full((m, m), 0.5 / m, device=device)
    b = torch.ones(m, m, device=device)
    y = torch.full((m, m), float(seed), device=device)
    for _ in range(int(round(units * per_unit))):
        y = torch.addmm(b, a, y)
    synchronize_device(device)
    return y[0, :4].clone()


def sleep_units(units: float, seconds_per_unit: float) -> None:
    """Deterministic-cost work: a sleeping rank uses no CPU, so its time does not depend on what shares the cores
    (only its wake-up can be late). For asserting an ordering or a ratio of times; :func:`compute_units` is real."""
    if units < 0 or seconds_per_unit < 0:
        raise ValueError(f"units and seconds_per_unit must be >= 0, got {units}, {seconds_per_unit}")
    time.sleep(units * seconds_per_unit)  # after a signal Python sleeps on for the time left (PEP 475)


def _gather_times(times, device, world_size: int) -> list[tuple[float, ...]]:
    """Per time given (time.monotonic: one clock for a host's processes), a tuple of every rank's."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(list(times), dtype=torch.float64, device=device)
    got = [torch.zeros(len(times), dtype=torch.float64, device=device) for _ in range(world_size)]
    dist.all_gather(got, mine)
    return list(zip(*(x.tolist() for x in got)))


def straggler_step(
    rank,
    world_size,
    shard_units,
    grad_numel=None,
    steps=1,
    m=None,
    per_unit=None,
    seconds_per_unit=None,
    timestamp_barrier=True,
    label="",
) -> dict:
    """``steps`` synchronous steps: compute proportional to ``shard_units[rank]``, then all-reduce, traced.
    ``seconds_per_unit``: None for real matmuls, or the sleep of one unit (one number, or one per rank).
    ``label`` (a message size) goes into every span's name: the lab's step breakdown reads it back from a trace.
    The "wait" span runs from this rank's arrival until the last rank's, from the all-gathered arrival times.
    ``timestamp_barrier=False`` gathers them *after* the all-reduce, as in a real step: the early ranks wait
    inside the collective (what a profiler shows), and ``wait_s`` is known but no span: ``comm_s >= wait_s``.
    ``start_skew_s``: how far apart the ranks left the barrier that starts each step."""
    import torch
    import torch.distributed as dist

    device, units = rank_device(), float(shard_units[rank])
    if seconds_per_unit is not None and not isinstance(seconds_per_unit, (int, float)):
        seconds_per_unit = seconds_per_unit[rank]
    if grad_numel is None:  # 16 KiB on the CPU, 64 MiB on a GPU
        grad_numel = (1 << 24) if device.type == "cuda" else (1 << 12)
    grad = torch.full((grad_numel,), float(rank + 1), device=device)
    if seconds_per_unit is None:
        compute_units(0.5, device, m, per_unit)  # warm-up: the first matmul pays one-off costs
    dist.all_reduce(grad.clone())  # warm-up: connections and this size's algorithm set up
    synchronize_device(device)
    plain = (f"shard {shard_units[rank]}", "wait for the slowest rank", "all_reduce")
    names = (f"compute ({label})", f"wait ({label})", f"all_reduce {label}") if label else plain
    out = dict(rank=rank, device=str(device), shard=shard_units[rank], timestamp_barrier=bool(timestamp_barrier))
    out |= {k: [] for k in ("compute_s", "wait_s", "comm_s", "start_skew_s")}
    for step in range(steps):
        dist.barrier()  # start every rank's step together
        with trace.span("compute", names[0]):
            if seconds_per_unit is None:
                compute_units(units, device, m, per_unit, seed=step)
            else:
                sleep_units(units, seconds_per_unit)
        compute = trace.latest()  # each figure is its span's own time: what a trace shows
        if timestamp_barrier:  # waiting measured before the collective, as its own span
            starts, arrivals = _gather_times((compute.start, compute.end), device, world_size)
            trace.record("wait", compute.end, max(compute.end, *arrivals), names[1])
        with trace.span("communicate", names[2]):
            g = grad.clone()
            dist.all_reduce(g)  # without the timestamp barrier, early ranks wait in here
            synchronize_device(device)
        comm = trace.latest()
        arrived = compute.end
        if not timestamp_barrier:  # after the collective: nothing it measures is changed
            # Arriving is entering the all-reduce, which ends on no rank before the last rank entered it: so
            # comm_s >= wait_s holds exactly, even when a rank is descheduled between its compute and the call.
            arrived = comm.start
            starts, arrivals = _gather_times((compute.start, arrived), device, world_size)
        out["compute_s"].append(compute.seconds)
        out["wait_s"].append(max(0.0, max(arrivals) - arrived))
        out["comm_s"].append(comm.seconds)
        out["start_skew_s"].append(max(starts) - min(starts))
    out["result"] = float(g[0].item())
    return out


def time_allreduce(rank: int, world_size: int, sizes_bytes, repeats: int = 5, iters: int = 10) -> list[float]:
    """Per size, this rank's median over ``repeats`` of the seconds per ``dist.all_reduce``, each a batch of
    ``iters`` calls after a barrier (spreading the start skew and the timer over many calls)."""
    import torch
    import torch.distributed as dist

    device, medians = rank_device(), []
    for nbytes in sizes_bytes:
        x = torch.ones(max(1, int(nbytes) // 4), device=device)
        dist.all_reduce(x)  # warm-up (connection and buffer set-up)
        synchronize_device(device)
        times = []
        for _ in range(repeats):
            with trace.span("communicate", f"all_reduce {int(nbytes)} B x {iters}"):
                times.append(time_batch(lambda: dist.all_reduce(x), iters, 0, device))  # one timing loop
        medians.append(statistics.median(times))
    return medians


def scaling_step(rank: int, world_size: int, total_units: float, grad_numel: int, repeats: int = 3) -> dict:
    """Strong scaling: ``total_units`` split evenly, no timestamp barrier; this rank's medians."""
    shards = [total_units / world_size] * world_size
    run = straggler_step(rank, world_size, shards, grad_numel, repeats, timestamp_barrier=False)
    med, compute, comm = statistics.median, run["compute_s"], run["comm_s"]
    return dict(rank=rank, compute_s=med(compute), comm_s=med(comm), step_s=med([c + a for c, a in zip(compute, comm)]))
