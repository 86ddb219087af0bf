"""The seven collectives of the course run by name on real ranks, for 05's results widget (every rank's input and
output from a real run). "avg" on CPU tensors is SUM, then divide (05's ``mh.lessons.ring.portable_op``)."""

from dataclasses import dataclass

from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.launcher.ranks import rank_device
from mgpu_helpers.models import collectives as reference
from mgpu_helpers.models.collectives import COLLECTIVES, ROOT


def run_collective(name: str, x, op: str = "sum"):
    """This rank's output of collective ``name`` on its input ``x`` (a 1-D tensor on the rank's device), None where
    it receives nothing; the conventions are :mod:`mgpu_helpers.models.collectives`'. ``op``: for the reductions."""
    import torch
    import torch.distributed as dist

    from mgpu_helpers.lessons import ring

    world_size, rank = dist.get_world_size(), dist.get_rank()
    reduce_op, divide_after = ring.portable_op(op, x)
    finish = lambda t: ring.divide_by_world_size(t) if divide_after else t
    x = x.contiguous()
    out = x.clone()  # broadcast, reduce and all_reduce work in place, on a copy of the input
    if name == "broadcast":
        dist.broadcast(out, src=ROOT)
        return out
    if name == "reduce":
        dist.reduce(out, dst=ROOT, op=reduce_op)
        return finish(out) if rank == ROOT else None
    if name == "all_reduce":
        dist.all_reduce(out, op=reduce_op)
        return finish(out)
    if name == "all_gather":
        parts = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(parts, x)  # the list form: every backend and torch version has it
        return torch.cat(parts)
    if name == "gather":
        parts = [torch.empty_like(x) for _ in range(world_size)] if rank == ROOT else None
        dist.gather(x, gather_list=parts, dst=ROOT)
        return torch.cat(parts) if rank == ROOT else None
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r}; one of {COLLECTIVES}")
    if x.numel() % world_size:
        raise ValueError(f"{name} needs a length divisible by world_size={world_size}, got {x.numel()}")
    out = x.new_empty(x.numel() // world_size)  # scatter and reduce_scatter: one piece each
    if name == "scatter":
        dist.scatter(out, scatter_list=list(x.chunk(world_size)) if rank == ROOT else None, src=ROOT)
        return out
    dist.reduce_scatter(out, list(x.chunk(world_size)), op=reduce_op)
    return finish(out)


def collective_rank_fn(rank: int, world_size: int, name: str, inputs, op: str = "sum"):
    """Rank function: ``name`` run on ``inputs[rank]``, the output as a plain list (None where a rank gets none)."""
    import torch

    out = run_collective(name, torch.tensor(inputs[rank], device=rank_device()), op)
    return None if out is None else out.cpu().tolist()


@dataclass(frozen=True)
class CollectiveRun:
    """Each rank's input and output, and whether they are right."""

    name: str
    op: str
    pattern: str
    backend: str
    inputs: list
    outputs: list
    ok: bool


def launch_collective(name="all_reduce", world_size=4, pattern="rank", op="sum", length=None, backend="auto"):
    """Collective ``name`` run on ``world_size`` ranks with inputs of ``pattern``: a checked :class:`CollectiveRun`."""
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r}; one of {COLLECTIVES}")
    length = reference.default_length(name, world_size) if length is None else length
    inputs = reference.make_inputs(pattern, world_size, length)
    res = run_ranks(collective_rank_fn, world_size, args=(name, inputs, op), backend=backend, stream=False, quiet=True)
    ok = reference.outputs_match(res.values, reference.expected_outputs(name, inputs, op))
    return CollectiveRun(name, op, pattern, res.backend, inputs, res.values, ok)


def run_and_draw(*args, **kwargs):
    """:func:`launch_collective` (the same arguments), then the figure of it. Returns ``(figure, run)``."""
    from mgpu_helpers.widgets import allreduce

    run = launch_collective(*args, **kwargs)
    title = f"{run.name} on {len(run.inputs)} ranks ({run.backend}), pattern '{run.pattern}'"
    return allreduce.draw_collective(run.name, run.inputs, run.outputs, run.op, title=title), run
