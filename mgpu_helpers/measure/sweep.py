"""Measured collective sweeps over message sizes, after NVIDIA nccl-tests' method: each rank pre-allocates its
buffers, warms up, then times a batch of back-to-back operations with no synchronisation between them. Unlike
nccl-tests (a host timer, averaged over ranks), on a GPU the batch sits between two CUDA events, and the slowest
rank's time is the operation's (a collective ends for everybody when it ends for the last rank). ``nbytes`` is the
whole buffer, as in nccl-tests (reduce_scatter's unreduced input, all_gather's gathered output); bandwidths in GB/s
(1e9 B/s). rs_ag (reduce-scatter then all-gather) is counted as an all-reduce."""

import statistics
from dataclasses import asdict, dataclass

from mgpu_helpers import hardware
from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.measure import timing
from mgpu_helpers.measure.workloads import PHASE_KEYS, straggler_step
from mgpu_helpers.models import bandwidth
from mgpu_helpers.report import progress as bars
from mgpu_helpers.report import sizes as sz

OPS = ("all_reduce", "reduce_scatter", "all_gather", "rs_ag")
BUSBW_AS = {op: op for op in OPS} | {"rs_ag": "all_reduce"}  # which nccl-tests formula each operation uses


@dataclass(frozen=True)
class SweepRow:
    """One measured (operation, size): ``time_us`` per operation, ``algbw``/``busbw`` in GB/s."""

    op: str
    nbytes: int
    time_us: float
    algbw: float
    busbw: float
    world_size: int
    backend: str
    iters: int

    def as_dict(self) -> dict:
        return asdict(self)


def default_sizes(gpu: bool) -> list[int]:
    """1 KiB .. 1 GiB (x4) on GPUs, as nccl-tests ``-b 1K -e 1G -f 4``; 1 KiB, 32 KiB, 1 MiB on the CPU."""
    return sz.sizes_between(sz.KiB, sz.GiB, 4) if gpu else sz.sizes_between(sz.KiB, sz.MiB, 32)


def _backend_and_sizes(world_size: int, backend: str, sizes) -> tuple[str, list]:
    chosen, _ = hardware.choose_backend(world_size, backend)
    return chosen, list(sizes) if sizes is not None else default_sizes(chosen == "nccl")


def run_quiet(fn, world_size: int, args: tuple, backend: str, timeout: float, env=None):
    """``run_ranks`` for a measurement: the ranks' output kept in ``.outputs``, not printed, and no summary line."""
    return run_ranks(fn, world_size, args=args, backend=backend, timeout=timeout, stream=False, quiet=True, env=env)


def default_iters(nbytes: int, gpu: bool) -> int:
    """Timed iterations: enough that a batch lasts well over the event resolution, capped for big sizes."""
    if not gpu:
        return 10 if nbytes <= 64 * sz.KiB else 5
    return int(min(200, max(20, (2 * sz.GiB) // max(nbytes, 1))))


def _flat(new: str, old: str):
    """A flat collective under its current name (torch 2.13 renamed ``X_tensor`` to ``X_single``)."""

    def call(output, inp, async_op: bool = False):
        import torch.distributed as dist

        return (getattr(dist, new, None) or getattr(dist, old))(output, inp, async_op=async_op)

    return call


all_gather_flat = _flat("all_gather_single", "all_gather_into_tensor")
reduce_scatter_flat = _flat("reduce_scatter_single", "reduce_scatter_tensor")  # sum


def make_op(op: str, nbytes: int, world_size: int, device):
    """``(run, actual_nbytes)``: the buffers allocated once, so ``run()`` allocates nothing inside the timed loop."""
    import torch
    import torch.distributed as dist

    n = sz.float32_elements(nbytes, world_size)
    full = torch.ones(n, dtype=torch.float32, device=device)
    part = torch.ones(n // world_size, dtype=torch.float32, device=device)
    runs = {
        "all_reduce": lambda: dist.all_reduce(full),
        "reduce_scatter": lambda: reduce_scatter_flat(part, full),
        "all_gather": lambda: all_gather_flat(full, part),
        # each rank sums its slice, then everyone gathers every summed slice: the all-reduce
        "rs_ag": lambda: (reduce_scatter_flat(part, full), all_gather_flat(full, part)),
    }
    if op not in runs:
        raise ValueError(f"unknown op {op!r}; one of {OPS}")
    return runs[op], n * 4


def sweep_rank(rank: int, world_size: int, sizes, ops=OPS, iters=None, warmup: int = 5) -> list[dict]:
    """Rank function: ``[{op, nbytes, seconds, iters}]`` for every (op, size)."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    device, out = rank_device(), []
    gpu = device.type == "cuda"
    for nbytes in sizes:
        for op in ops:
            run, actual = make_op(op, int(nbytes), world_size, device)
            n_iters = iters or default_iters(actual, gpu)
            seconds = timing.time_batch(run, n_iters, warmup if gpu else min(warmup, 2), device)
            out.append({"op": op, "nbytes": actual, "seconds": seconds, "iters": n_iters})
            del run
        if gpu:
            torch.cuda.empty_cache()
    return out


def combine(per_rank: list[list[dict]], world_size: int, backend: str) -> list[SweepRow]:
    """Rows from every rank's timings: an operation takes as long as its slowest rank."""
    rows = []
    for i, first in enumerate(per_rank[0]):
        s, op, nb = max(rank_rows[i]["seconds"] for rank_rows in per_rank), first["op"], first["nbytes"]
        busbw = bandwidth.busbw(BUSBW_AS[op], nb, s, world_size) / 1e9
        rows.append(SweepRow(op, nb, s * 1e6, bandwidth.algbw(nb, s) / 1e9, busbw, world_size, backend, first["iters"]))
    return rows


def run_sweep(
    world_size=2, sizes=None, ops=OPS, iters=None, warmup=5, backend="auto", timeout=300.0, progress=None
) -> list[SweepRow]:
    """One :class:`SweepRow` per (size, op). ``progress`` (:func:`mgpu_helpers.report.progress.callback`) runs
    each size in a launch of its own, so the bar moves; without it every size runs in a single launch."""
    chosen, sizes = _backend_and_sizes(world_size, backend, sizes)
    groups = [[s] for s in sizes] if progress is not None and progress is not False else [sizes]
    update, close = bars.callback(progress, "sizes")
    rows, done = [], 0
    update(0, len(sizes))
    try:
        for group in groups:
            res = run_quiet(sweep_rank, world_size, (group, tuple(ops), iters, warmup), chosen, timeout)
            rows += combine(res.values, world_size, res.backend)
            done += len(group)
            update(done, len(sizes))
    finally:
        close()
    return rows


def repeats_rank(rank: int, world_size: int, nbytes: int, ops, repeats: int, iters=None, warmup: int = 5) -> list:
    """Rank function: ``repeats`` rounds of :func:`sweep_rank` at one size."""
    return [sweep_rank(rank, world_size, [nbytes], ops, iters, warmup if r == 0 else 1) for r in range(repeats)]


def run_repeats(
    world_size=2, nbytes=sz.MiB, ops=("all_reduce", "rs_ag"), repeats=5, backend="auto", iters=None, timeout=300.0
) -> list[dict]:
    """One ``{op: time_us}`` per round of one launch, so that a comparison comes with its own spread."""
    chosen, _ = hardware.choose_backend(world_size, backend)
    res = run_quiet(repeats_rank, world_size, (int(nbytes), tuple(ops), repeats, iters), chosen, timeout)
    rounds = (combine([v[r] for v in res.values], world_size, res.backend) for r in range(repeats))
    return [{row.op: row.time_us for row in rows} for rows in rounds]


def step_rank(rank, world_size, sizes, steps=5, compute_n=128, slow_rank=None) -> list[dict]:
    """Rank function: per size, the median seconds of each phase of :func:`~.workloads.straggler_step`. The
    compute (a unit: 4 matmuls of ``compute_n``) is the same for every size (a backward that does not change while
    its gradient bucket grows); ``slow_rank`` does three times as much; the spans carry the size."""
    shards, out = tuple(3 if r == slow_rank else 1 for r in range(world_size)), []
    for nbytes in sizes:
        n = sz.float32_elements(int(nbytes), world_size)
        label = sz.format_bytes(n * 4)
        got = straggler_step(rank, world_size, shards, n, steps, m=compute_n, per_unit=4, label=label)
        out.append({"nbytes": n * 4} | {k: statistics.median(got[v]) for k, v in PHASE_KEYS.items()})
    return out


def per_rank_wait_us(per_rank: list[list[dict]]) -> list[list[float]]:
    """``[rank][size index]``: each rank's median wait (us), from :func:`step_rank` results."""
    return [[row["wait"] * 1e6 for row in rows] for rows in per_rank]


def combine_steps(per_rank: list[list[dict]]) -> list[dict]:
    """Per size (us): the slowest rank's compute, the longest wait, the median communicate, and ``efficiency``
    (compute's share of the step). Which part limits the step is left to the reader (notebook 12 asks)."""
    rows = []
    for i, first in enumerate(per_rank[0]):
        comp, wait = (max(r[i][phase] for r in per_rank) for phase in ("compute", "wait"))
        comm = statistics.median(r[i]["communicate"] for r in per_rank)
        total = comp + wait + comm
        us = {"compute_us": comp, "wait_us": wait, "comm_us": comm, "step_us": total}
        rows.append({"nbytes": first["nbytes"]} | {k: v * 1e6 for k, v in us.items()} | {"efficiency": comp / total})
    return rows


def run_step_breakdown(
    world_size=2, sizes=None, steps=5, compute_n=None, backend="auto", timeout=300.0, slow_rank=None
):
    """``(rows of combine_steps, the raw RankResults with spans)`` of :func:`step_rank` on ``world_size`` ranks."""
    chosen, sizes = _backend_and_sizes(world_size, backend, sizes)
    n = compute_n or (4096 if chosen == "nccl" else 256)
    res = run_quiet(step_rank, world_size, (sizes, steps, n, slow_rank), chosen, timeout)
    return combine_steps(res.values), res


def buffer_bytes(nbytes: int, world_size: int) -> dict:
    """Communication-buffer bytes per rank, by approach, for a float32 gradient of ``nbytes``: ``rs_ag_in_place`` needs
    no shard buffer (NCCL's in-place reduce-scatter writes rank r's summed slice into slice r of the input, and the
    in-place all-gather sends from there); ``reduce_scatter_only`` keeps just its part (sharded optimizer states)."""
    n = sz.float32_elements(nbytes, world_size) * 4
    shard = n // world_size
    return {"all_reduce": n, "rs_ag_out_of_place": n + shard, "rs_ag_in_place": n, "reduce_scatter_only": shard}
