"""Rank functions shared by the notebooks: real, traced work whose cost is known in advance.

Each function here is a rank function ``fn(rank, world_size, ...)`` for :func:`mgpu_helpers.run_ranks` (or
``torchrun_main``). They run unchanged on gloo CPU ranks and on NCCL GPU ranks; only the default sizes
depend on the device (small on the CPU, real on a GPU).

- :func:`straggler_step`: compute proportional to the rank's shard, then an all-reduce; records compute /
  wait / communicate spans, with the wait at the collective *measured* from the ranks' arrival times.
- :func:`time_allreduce`: all-reduce time over message sizes (for fitting the alpha-beta model).
- :func:`scaling_step`: a fixed total job split over the ranks plus a gradient all-reduce (strong scaling).
- :func:`sleep_straggler_step`: :func:`straggler_step` whose compute is a sleep of a fixed length per unit of
  shard, with each step's noise measured: for claims (and checked outputs) a loaded machine cannot break.
"""
from __future__ import annotations

import time

# Matrix size and matmuls per unit of shard, by device type: one unit costs a few ms on either.
CPU_SIZES = dict(m=128, per_unit=80)
GPU_SIZES = dict(m=4096, per_unit=4)


def _sync(device) -> None:
    """Wait for queued GPU work (CUDA is asynchronous: a span must not end before its kernels do)."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def unit_sizes(device) -> dict:
    """The (m, per_unit) used on ``device``: m x m float32 matmuls, ``per_unit`` of them per unit of work."""
    return dict(GPU_SIZES if device.type == "cuda" else CPU_SIZES)


def compute_units(units: float, device, m: int | None = None, per_unit: int | None = None, seed: int = 0):
    """Do ``units`` units of deterministic work on ``device``; returns a small tensor summarising it.

    One unit = ``per_unit`` matmuls of an m x m float32 matrix, so the cost is proportional to ``units``
    (fractional units round to whole matmuls). The values stay bounded; the result depends on ``seed``.
    """
    import torch
    if device.type == "cpu":
        # One thread per rank: a CPU rank stands in for one device, and its cost must not depend on how
        # many threads the launcher gave it (several threads per rank on a busy machine spin and thrash).
        torch.set_num_threads(1)
    sizes = unit_sizes(device)
    m = m or sizes["m"]
    per_unit = per_unit or sizes["per_unit"]
    # A constant matrix made on the device: no host-side set-up cost inside the timed span. Rows sum
    # to 0.5, so y <- a @ y + 1 stays bounded (no overflow, no denormals). ``seed`` shifts the start.
    a = torch.full((m, m), 0.5 / m, device=device)
    b = torch.ones(m, m, device=device)
    y = torch.full((m, m), float(seed), device=device)
    for _ in range(int(round(units * per_unit))):
        y = torch.addmm(b, a, y)   # y <- a @ y + 1: bounded (a's rows sum to ~0.5), no denormals
    _sync(device)
    return y[0, :4].clone()


def _arrivals(t: float, device, world_size: int) -> list[float]:
    """All-gather every rank's arrival time (time.monotonic: one clock for all processes of a host)."""
    import torch
    import torch.distributed as dist
    mine = torch.tensor([t], dtype=torch.float64, device=device)
    got = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world_size)]
    dist.all_gather(got, mine)
    return [float(x.item()) for x in got]


def straggler_step(rank: int, world_size: int, shards, grad_numel: int | None = None, steps: int = 1,
                   m: int | None = None, per_unit: int | None = None) -> dict:
    """One synchronous step per ``steps``: compute proportional to ``shards[rank]``, then all-reduce.

    Records spans with :mod:`mgpu_helpers.measure.trace`: "compute" (the rank's shard), "wait" (from this rank's
    arrival at the collective until the last rank arrived, measured from the all-gathered arrival times)
    and "communicate" (the all-reduce of a ``grad_numel`` float32 gradient; default by device). Returns a dict with the
    rank, device, shard, and per-step lists ``compute_s``, ``wait_s``, ``comm_s``, plus ``result`` (the
    all-reduced gradient's first value, identical on every rank).
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.measure import trace
    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    units = float(shards[rank])
    if grad_numel is None:   # 16 KiB on the CPU, 64 MiB on a GPU
        grad_numel = (1 << 24) if device.type == "cuda" else (1 << 12)
    grad = torch.full((grad_numel,), float(rank + 1), device=device)
    compute_units(0.5, device, m, per_unit)       # warm-up: first matmul pays one-off costs
    dist.all_reduce(torch.zeros(1, device=device))
    _sync(device)
    out = dict(rank=rank, device=str(device), shard=shards[rank], compute_s=[], wait_s=[], comm_s=[])
    for step in range(steps):
        dist.barrier()                            # start every rank's step together
        t0 = time.monotonic()
        with trace.span("compute", f"shard {shards[rank]}"):
            compute_units(units, device, m, per_unit, seed=step)
        arrived = time.monotonic()
        last = max(_arrivals(arrived, device, world_size))
        trace.record("wait", arrived, max(arrived, last), "wait for the slowest rank")
        t_comm = time.monotonic()
        with trace.span("communicate", "all_reduce"):
            g = grad.clone()
            dist.all_reduce(g)
            _sync(device)
        t_end = time.monotonic()
        out["compute_s"].append(arrived - t0)
        out["wait_s"].append(max(0.0, last - arrived))
        out["comm_s"].append(t_end - t_comm)
    out["result"] = float(g[0].item())
    return out


def time_allreduce(rank: int, world_size: int, sizes_bytes, repeats: int = 5, iters: int = 10) -> list[float]:
    """Seconds per ``dist.all_reduce`` of a float32 buffer, for each size in ``sizes_bytes``.

    Each measurement times ``iters`` back-to-back calls (so that the ranks' start skew and the timer
    are spread over many calls) after a barrier; returns, per size, the median over ``repeats`` of the
    time per call, as seen by this rank. On a GPU the time includes the kernels (synchronised).
    """
    import statistics

    import torch
    import torch.distributed as dist

    from mgpu_helpers.measure import trace
    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    medians = []
    for nbytes in sizes_bytes:
        x = torch.ones(max(1, int(nbytes) // 4), device=device)
        dist.all_reduce(x)           # warm-up (connection and buffer set-up)
        _sync(device)
        times = []
        for _ in range(repeats):
            dist.barrier()
            _sync(device)
            t0 = time.monotonic()
            with trace.span("communicate", f"all_reduce {int(nbytes)} B x {iters}"):
                for _ in range(iters):
                    dist.all_reduce(x)
                _sync(device)
            times.append((time.monotonic() - t0) / iters)
        medians.append(statistics.median(times))
    return medians


def scaling_step(rank: int, world_size: int, total_units: float, grad_numel: int, repeats: int = 3,
                 weak: bool = False) -> dict:
    """Strong (or weak) scaling step: ``total_units / world_size`` units of compute (``total_units`` per
    rank when ``weak``), then an all-reduce of ``grad_numel`` float32. Returns medians of compute, comm
    and step seconds on this rank."""
    import statistics

    import torch
    import torch.distributed as dist

    from mgpu_helpers.measure import trace
    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    units = total_units if weak else total_units / world_size
    grad = torch.ones(grad_numel, device=device)
    compute_units(0.5, device)
    dist.all_reduce(grad.clone())
    _sync(device)
    comp, comm, step = [], [], []
    for i in range(repeats):
        dist.barrier()
        _sync(device)
        t0 = time.monotonic()
        with trace.span("compute"):
            compute_units(units, device, seed=i)
        t1 = time.monotonic()
        with trace.span("communicate", "all_reduce"):
            dist.all_reduce(grad)
            _sync(device)
        t2 = time.monotonic()
        comp.append(t1 - t0)
        comm.append(t2 - t1)
        step.append(t2 - t0)
    med = statistics.median
    return dict(rank=rank, compute_s=med(comp), comm_s=med(comm), step_s=med(step))


def sleep_straggler_step(rank: int, world_size: int, shards, unit_s: float = 0.02, steps: int = 3,
                         grad_numel: int = 1024) -> dict:
    """:func:`straggler_step` with a cost known exactly: each unit of a shard is ``unit_s`` seconds of sleep.

    Sleeping ranks do not compete for cores, so a loaded machine cannot reorder them; it can only make a
    sleep end late, or a rank leave the step's barrier late, and both are measured here. Records the same
    compute / wait / communicate spans. Returns the rank's ``shard`` and planned ``planned_s``
    (= shard x unit_s), and per step: ``compute_s``, ``wait_s`` (until the last rank arrived, from the
    all-gathered arrival times), ``comm_s``, and ``late_s``: every rank's lateness that step (arrival minus
    the earliest start minus its planned cost; the same list on every rank). So a wait can be checked
    against the plan within that step's own noise: ``|wait - planned wait| <= max(late_s) - min(late_s)``.
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device
    from mgpu_helpers.measure import trace

    device = rank_device()
    planned = [float(s) * unit_s for s in shards]
    grad = torch.full((grad_numel,), float(rank + 1), device=device)
    dist.all_reduce(torch.zeros(1, device=device))     # connections up before the first timed step
    _sync(device)
    out = dict(rank=rank, device=str(device), shard=shards[rank], planned_s=planned[rank], compute_s=[],
               wait_s=[], comm_s=[], late_s=[])
    for _step in range(steps):
        dist.barrier()
        t0 = time.monotonic()
        with trace.span("compute", f"shard {shards[rank]} (sleep)"):
            time.sleep(planned[rank])
        arrived = time.monotonic()
        starts = _arrivals(t0, device, world_size)
        arrivals = _arrivals(arrived, device, world_size)
        last = max(arrivals)
        trace.record("wait", arrived, max(arrived, last), "wait for the slowest rank")
        t_comm = time.monotonic()
        with trace.span("communicate", "all_reduce"):
            g = grad.clone()
            dist.all_reduce(g)
            _sync(device)
        out["compute_s"].append(arrived - t0)
        out["wait_s"].append(max(0.0, last - arrived))
        out["comm_s"].append(time.monotonic() - t_comm)
        out["late_s"].append([a - min(starts) - p for a, p in zip(arrivals, planned)])
    out["result"] = float(g[0].item())
    return out
