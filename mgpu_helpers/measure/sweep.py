"""Measured collective sweeps over message sizes, after NVIDIA nccl-tests' method.

:func:`run_sweep` times all_reduce, reduce_scatter, all_gather and rs_ag (reduce-scatter then all-gather, an
all-reduce in two halves) on ``world_size`` ranks; :func:`run_repeats` times one size several times in one
launch, :func:`run_step_breakdown` a training-like step per size. Each rank pre-allocates its buffers, warms up,
then times a batch of back-to-back operations with no synchronisation per operation, as nccl-tests does. Two
differences from nccl-tests (which wraps the batch in a host timer and by default averages over ranks): on a
GPU the batch sits between two CUDA events (``perf_counter`` around it on the CPU), and the slowest rank's time
is the time of the operation (the collective ends for everybody when it ends for the last rank).

Sizes follow nccl-tests: ``nbytes`` is the size of the whole buffer (for reduce_scatter the unreduced
input, for all_gather the gathered output), and bandwidths are in GB/s (1e9 bytes per second), with
busbw from :func:`mgpu_helpers.models.bandwidth.busbw`. rs_ag is counted as an all-reduce.
"""

import statistics
from dataclasses import asdict, dataclass

from mgpu_helpers import hardware
from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.measure import timing
from mgpu_helpers.models import bandwidth
from mgpu_helpers.report import sizes as sz

OPS = ("all_reduce", "reduce_scatter", "all_gather", "rs_ag")
BUSBW_AS = {op: op for op in OPS} | {"rs_ag": "all_reduce"}  # which nccl-tests formula each operation uses
KiB, MiB, GiB = sz.KiB, sz.MiB, sz.GiB


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
    return sz.sizes_between(KiB, GiB, 4) if gpu else sz.sizes_between(KiB, MiB, 32)


def _backend_and_sizes(world_size: int, backend: str, sizes) -> tuple[str, list]:
    """The backend that runs (:func:`mgpu_helpers.hardware.choose_backend`) and ``sizes`` (default: its
    :func:`default_sizes`)."""
    chosen, _ = hardware.choose_backend(world_size, backend)
    return chosen, list(sizes) if sizes is not None else default_sizes(chosen == "nccl")


def _launch(fn, world_size: int, args: tuple, backend: str, timeout: float, stream: bool = False):
    return run_ranks(fn, world_size, args=args, backend=backend, timeout=timeout, stream=stream, quiet=True)


def default_iters(nbytes: int, gpu: bool) -> int:
    """Timed iterations: enough that a batch lasts well over the event resolution, capped for big sizes."""
    if not gpu:
        return 10 if nbytes <= 64 * KiB else 5
    return int(min(200, max(20, (2 * GiB) // max(nbytes, 1))))


# --- Inside a rank ------------------------------------------------------------------------------------------------


def _flat(new: str, old: str):
    """A flat collective under its current name (torch 2.13 renamed ``X_tensor`` to ``X_single``)."""

    def call(output, inp, async_op: bool = False):
        import torch.distributed as dist

        return (getattr(dist, new, None) or getattr(dist, old))(output, inp, async_op=async_op)

    return call


all_gather_flat = _flat("all_gather_single", "all_gather_into_tensor")
reduce_scatter_flat = _flat("reduce_scatter_single", "reduce_scatter_tensor")  # sum


def make_op(op: str, nbytes: int, world_size: int, device):
    """Allocate the buffers of ``op`` for ``nbytes`` once and return ``(run, actual_nbytes)``.

    ``run()`` issues one operation on the pre-allocated buffers (no allocation inside the timed loop).
    """
    import torch
    import torch.distributed as dist

    n = sz.float32_elements(nbytes, world_size)
    full = torch.ones(n, dtype=torch.float32, device=device)
    part = torch.ones(n // world_size, dtype=torch.float32, device=device)

    def rs_ag():
        reduce_scatter_flat(part, full)  # each rank: the sum of its slice
        all_gather_flat(full, part)  # everyone: every summed slice = the all-reduce

    runs = {
        "all_reduce": lambda: dist.all_reduce(full),
        "reduce_scatter": lambda: reduce_scatter_flat(part, full),
        "all_gather": lambda: all_gather_flat(full, part),
        "rs_ag": rs_ag,
    }
    if op not in runs:
        raise ValueError(f"unknown op {op!r}; one of {OPS}")
    return runs[op], n * 4


def sweep_rank(rank: int, world_size: int, sizes, ops=OPS, iters=None, warmup: int = 5) -> list[dict]:
    """Rank function: time every (op, size) on this rank. Returns ``[{op, nbytes, seconds, iters}]``."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    gpu = device.type == "cuda"
    out = []
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
    world_size: int = 2,
    sizes=None,
    ops=OPS,
    iters=None,
    warmup: int = 5,
    backend: str = "auto",
    timeout: float = 300.0,
    progress=None,
    stream: bool = False,
) -> list[SweepRow]:
    """Measure ``ops`` over ``sizes`` on ``world_size`` ranks; returns one :class:`SweepRow` per (size, op).

    ``sizes`` defaults to :func:`default_sizes` for the backend that runs (NCCL: 1 KiB .. 1 GiB).
    ``progress``: ``True`` or a description (``"sizes"``) shows a ``tqdm.auto`` bar, a function
    ``update(done, total)`` is called after each size (see :func:`mgpu_helpers.report.progress.callback`);
    the sizes then run in one launch each (so the bar moves); without it every size runs in a single launch.
    """
    from mgpu_helpers.report import progress as bars

    chosen, sizes = _backend_and_sizes(world_size, backend, sizes)
    show = progress is not None and progress is not False
    groups = [[s] for s in sizes] if show else [sizes]
    update, close = bars.callback(progress, "sizes")
    rows: list[SweepRow] = []
    update(0, len(sizes))
    done = 0
    try:
        for group in groups:
            res = _launch(sweep_rank, world_size, (group, tuple(ops), iters, warmup), chosen, timeout, stream)
            rows += combine(res.values, world_size, res.backend)
            done += len(group)
            update(done, len(sizes))
    finally:
        close()
    return rows


def repeats_rank(rank: int, world_size: int, nbytes: int, ops, repeats: int, iters=None, warmup: int = 5) -> list:
    """Rank function: ``repeats`` rounds of :func:`sweep_rank` at one size; per round ``[{op, nbytes, seconds}]``."""
    return [sweep_rank(rank, world_size, [nbytes], ops, iters, warmup if r == 0 else 1) for r in range(repeats)]


def run_repeats(
    world_size: int = 2,
    nbytes: int = MiB,
    ops=("all_reduce", "rs_ag"),
    repeats: int = 5,
    backend: str = "auto",
    iters=None,
    timeout: float = 300.0,
) -> list[dict]:
    """Time ``ops`` at ``nbytes`` ``repeats`` times in one launch; returns one ``{op: time_us}`` per round
    (each the slowest rank's, as in :func:`combine`), so that a comparison comes with its own spread."""
    chosen, _ = hardware.choose_backend(world_size, backend)
    res = _launch(repeats_rank, world_size, (int(nbytes), tuple(ops), repeats, iters), chosen, timeout)
    return [
        {row.op: row.time_us for row in combine([v[r] for v in res.values], world_size, res.backend)}
        for r in range(repeats)
    ]


# --- A training-like step per size: compute, wait, communicate ----------------------------------------------------


def step_rank(
    rank: int,
    world_size: int,
    sizes,
    steps: int = 5,
    compute_n: int = 128,
    compute_repeats: int = 4,
    slow_rank=None,
    slow_factor: int = 3,
) -> list[dict]:
    """Rank function: for each size, ``steps`` steps of compute, wait for the slowest rank, all-reduce ``nbytes``.

    Each size runs :func:`mgpu_helpers.measure.workloads.straggler_step`: the compute is ``compute_repeats``
    matrix products of ``compute_n`` x ``compute_n`` (the same for every size: a model whose backward does not
    change while its gradient bucket grows), and ``slow_rank`` does ``slow_factor`` times as much; its spans
    carry the size in their names. Returns per size the median seconds of each phase on this rank.
    """
    from mgpu_helpers.measure.workloads import straggler_step

    shards = tuple(slow_factor if r == slow_rank else 1 for r in range(world_size))
    out = []
    for nbytes in sizes:
        n = sz.float32_elements(int(nbytes), world_size)
        label = sz.format_bytes(n * 4)
        got = straggler_step(rank, world_size, shards, n, steps, m=compute_n, per_unit=compute_repeats, label=label)
        phases = {"compute": "compute_s", "wait": "wait_s", "communicate": "comm_s"}
        out.append({"nbytes": n * 4} | {k: statistics.median(got[v]) for k, v in phases.items()})
    return out


def per_rank_wait_us(per_rank: list[list[dict]]) -> list[list[float]]:
    """``[rank][size index]``: each rank's median wait for the slowest rank (us), from :func:`step_rank` results."""
    return [[row["wait"] * 1e6 for row in rows] for rows in per_rank]


def combine_steps(per_rank: list[list[dict]]) -> list[dict]:
    """Per size: compute = slowest rank's, wait = the longest wait, communicate = median over ranks (us);
    ``efficiency`` = compute / (compute + wait + communicate), the share of the step spent computing.
    Which part limits the step is left to the reader (notebook 12 asks for it)."""
    rows = []
    for i, first in enumerate(per_rank[0]):
        comp = max(r[i]["compute"] for r in per_rank)
        wait = max(r[i]["wait"] for r in per_rank)
        comm = statistics.median(r[i]["communicate"] for r in per_rank)
        total = comp + wait + comm
        us = {"compute_us": comp, "wait_us": wait, "comm_us": comm, "step_us": total}
        rows.append({"nbytes": first["nbytes"]} | {k: v * 1e6 for k, v in us.items()} | {"efficiency": comp / total})
    return rows


def run_step_breakdown(
    world_size: int = 2,
    sizes=None,
    steps: int = 5,
    compute_n=None,
    backend: str = "auto",
    timeout: float = 300.0,
    slow_rank=None,
    slow_factor: int = 3,
):
    """Run :func:`step_rank` on ``world_size`` ranks. Returns ``(rows, results)``: the combined rows
    (see :func:`combine_steps`) and the raw :class:`~mgpu_helpers.launcher.results.RankResults` (with spans)."""
    chosen, sizes = _backend_and_sizes(world_size, backend, sizes)
    n = compute_n or (4096 if chosen == "nccl" else 256)
    res = _launch(step_rank, world_size, (sizes, steps, n, 4, slow_rank, slow_factor), chosen, timeout)
    return combine_steps(res.values), res


# --- All-reduce against reduce-scatter + all-gather: buffer memory (the lab's compare_rank runs the comparison) ----


def buffer_bytes(nbytes: int, world_size: int) -> dict:
    """Bytes of communication buffers one rank holds, by approach, for a float32 gradient of ``nbytes``:

    - ``all_reduce``: in place, the gradient buffer itself (every rank keeps the full sum);
    - ``rs_ag_out_of_place``: the gradient buffer plus a separate 1/n shard that reduce-scatter writes and
      all-gather reads;
    - ``rs_ag_in_place``: the gradient buffer only: NCCL's in-place reduce-scatter writes rank r's summed
      slice into slice r of the input buffer itself, and the in-place all-gather sends from that slice;
    - ``reduce_scatter_only``: what a rank must keep when it only needs its own part of the sum (sharded
      optimizer states): the 1/n shard.
    """
    n = sz.float32_elements(nbytes, world_size) * 4
    shard = n // world_size
    return {"all_reduce": n, "rs_ag_out_of_place": n + shard, "rs_ag_in_place": n, "reduce_scatter_only": shard}
