"""Evidence for the diagnostics handbook's symptoms: no speedup, a hung collective, one slow rank ("always waiting
on the same rank": look at each rank's distribution, :func:`per_rank_phase_times`, not the global mean). Where each
rank stopped at a hang is torch's flight recorder's to say (the launcher dumps it at the timeout:
:class:`mgpu_helpers.RankTimeout`); the scenarios that hang on purpose are lesson 10's own (``lessons.diagnostics``)."""

import re
import statistics

from mgpu_helpers import hardware
from mgpu_helpers.launcher import trace
from mgpu_helpers.launcher.ranks import rank_device
from mgpu_helpers.measure import sweep, workloads
from mgpu_helpers.measure.timing import elapsed_s, synchronize_device


def run_schedule(rank: int, world_size: int, schedules) -> int:
    """Call the collectives ``schedules[rank]`` names, in order; how many completed (disagreeing schedules hang)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)  # on the CPU (gloo) even on a GPU machine: a blocked collective blocks the host
    calls = {
        "all_reduce": lambda: dist.all_reduce(t),
        "broadcast": lambda: dist.broadcast(t, 0),
        "barrier": dist.barrier,
        "all_gather_into_tensor": lambda: sweep.all_gather_flat(torch.empty(4 * world_size), t),
        "reduce_scatter_tensor": lambda: sweep.reduce_scatter_flat(torch.empty(4), torch.ones(4 * world_size)),
    }
    if unknown := [name for name in schedules[rank] if name not in calls]:
        raise ValueError(f"unknown collective {unknown[0]!r} in the schedule of rank {rank}")
    for k, name in enumerate(schedules[rank]):
        print(f"rank {rank}: collective {k} of the schedule, {name}", flush=True)
        calls[name]()
    return len(schedules[rank])


def scaling_probes(rank: int, world_size: int, configs: dict, repeats: int = 3) -> dict:
    """For "more ranks, no speedup", per ``name: (total_units, grad_numel)``: ``alone_s`` (the whole job on this rank,
    no all-reduce: the one-rank step) and :func:`~.workloads.scaling_step`'s medians of it split over the ranks."""
    import torch.distributed as dist

    device = rank_device()
    workloads.compute_units(1.0, device)  # warm-up (and one thread a CPU rank): the first products load the kernels
    out, kept = {}, []
    for name, (total_units, grad_numel) in configs.items():
        alone = []
        for i in range(repeats):
            dist.barrier()
            synchronize_device(device)
            # wall clock (perf_counter) around the product, which synchronises the device itself
            alone.append(elapsed_s(lambda: workloads.compute_units(total_units, device, seed=i), library=None))
        trace.collect()  # keep only the shared steps' spans (below)
        shared = workloads.scaling_step(rank, world_size, total_units, grad_numel, repeats)
        kept += [(sp, name) for sp in trace.collect()]
        out[name] = {"alone_s": statistics.median(alone), **shared}
    for sp, name in kept:  # recorded again, named by their configuration
        trace.record(sp.kind, sp.start, sp.end, f"{name} {sp.name}")
    return out


def comm_fraction(probe_values) -> float:
    """The all-reduce's share of the slowest rank's step, from per-rank :func:`~.workloads.scaling_step` medians."""
    slowest = max(probe_values, key=lambda v: v["step_s"])
    return slowest["comm_s"] / slowest["step_s"]


def per_rank_phase_times(values) -> dict:
    """``{phase: [each rank's per-step seconds]}`` from :func:`~.workloads.straggler_step` results."""
    return {phase: [v[key] for v in values] for phase, key in workloads.PHASE_KEYS.items()}


def transports(lines) -> list[str]:
    """The transports (``P2P``, ``SHM``, ``NET``) NCCL's ``NCCL_DEBUG=INFO`` lines name after ``via``, each once."""
    named = [m.group(1).split("/")[0] for m in (re.search(r"\bvia (\S+)", ln) for ln in lines) if m]
    return list(dict.fromkeys(named))


def medians(per_rank) -> list[float]:
    return [statistics.median(v) for v in per_rank]


def nccl_debug_lines(world_size: int = 2) -> list[str]:
    """The ranks' NCCL lines of one all-reduce under ``NCCL_DEBUG=INFO``; empty without the GPUs for NCCL."""
    backend, _ = hardware.choose_backend(world_size, "auto")
    if backend != "nccl":
        return []

    def one_allreduce(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(1024, device=rank_device())
        dist.all_reduce(t)
        torch.cuda.synchronize()
        return float(t[0])

    res = sweep.run_quiet(one_allreduce, world_size, (), "nccl", 120.0, {"NCCL_DEBUG": "INFO"})
    return [f"[rank {r}] {ln}" for r, lines in enumerate(res.outputs) for ln in lines if "NCCL" in ln]
