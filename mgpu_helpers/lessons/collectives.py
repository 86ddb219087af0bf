"""Collectives written by hand from point-to-point messages, and the collectives of the course run by name.

Everything here runs *inside* a rank (the process group must be up), under gloo on the CPU and under NCCL
on GPUs with the same code.

- :func:`ring_all_reduce` (in place) is the classic ring: a reduce-scatter phase of ``n - 1`` steps in which
  every rank passes one chunk to its right-hand neighbour and adds the chunk it receives from the left, then
  an all-gather phase of ``n - 1`` steps that passes the finished chunks round the ring. Each rank sends
  ``2 (n - 1) / n`` of the tensor in total, the minimum for an all-reduce (hence busbw's factor).
- :func:`ring_all_reduce_steps` does the same and records each rank's tensor after every step, for the
  step-by-step picture (:func:`mgpu_helpers.widgets.allreduce.draw_ring_steps`).
- :func:`run_collective` runs one collective of the course by name on a rank's input and returns the
  rank's output, which the all-reduce results widget draws.

Why every step is one ``batch_isend_irecv`` and not a bare ``isend`` then ``irecv``: under NCCL a send may
wait until the matching receive runs (for large messages always, and the first message between two ranks
also sets the connection up), and NCCL runs the operations of one communicator in order on one CUDA
stream. A rank whose stream holds "send to the right" before "receive from the left" waits on its
neighbour, who waits on its own neighbour, round the whole ring: a deadlock. Grouping the send and the
receive of a step (``ncclGroupStart/End`` underneath) lets NCCL run them together. Under gloo the group is
simply the two non-blocking calls.
"""
from __future__ import annotations

REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


def chunk_bounds(length: int, world_size: int) -> list[tuple[int, int]]:
    """Split ``range(length)`` into ``world_size`` contiguous chunks, sizes differing by at most one.

    Returns ``[(start, stop), ...]``, one per chunk; like ``torch.tensor_split``, the first
    ``length % world_size`` chunks get one element more, and chunks may be empty when
    ``length < world_size``.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    base, extra = divmod(length, world_size)
    bounds, start = [], 0
    for c in range(world_size):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(world_size: int) -> list[tuple[str, int, list[tuple[int, int]]]]:
    """Which chunk each rank sends at each step of the ring: ``[(phase, step, [(send, recv) per rank])]``.

    In step ``s`` of the reduce-scatter phase rank ``r`` sends chunk ``(r - s) % n`` to rank ``r + 1`` and
    receives chunk ``(r - s - 1) % n`` from rank ``r - 1``, adding it to its own. After ``n - 1`` steps rank
    ``r`` holds the finished chunk ``(r + 1) % n``. The all-gather phase then sends ``(r + 1 - s) % n`` and
    receives ``(r - s) % n``, copying instead of adding.
    """
    n = world_size
    plan = []
    for s in range(n - 1):
        plan.append(("reduce-scatter", s, [((r - s) % n, (r - s - 1) % n) for r in range(n)]))
    for s in range(n - 1):
        plan.append(("all-gather", s, [((r + 1 - s) % n, (r - s) % n) for r in range(n)]))
    return plan


def _reducer(op: str):
    import torch

    if op in ("sum", "avg"):
        return lambda acc, got: acc.add_(got)
    if op == "max":
        return lambda acc, got: torch.maximum(acc, got, out=acc)
    if op == "min":
        return lambda acc, got: torch.minimum(acc, got, out=acc)
    if op == "prod":
        return lambda acc, got: acc.mul_(got)
    raise ValueError(f"op must be one of {REDUCE_OPS}, not {op!r}")


def _exchange(send_buf, dst: int, recv_buf, src: int, group=None):
    """Post one send and one receive together; returns the works to wait on (empty when nothing to move)."""
    import torch.distributed as dist

    ops = []
    if send_buf is not None and send_buf.numel() > 0:
        ops.append(dist.P2POp(dist.isend, send_buf, dst, group))
    if recv_buf is not None and recv_buf.numel() > 0:
        ops.append(dist.P2POp(dist.irecv, recv_buf, src, group))
    return dist.batch_isend_irecv(ops) if ops else []


def _ring(tensor, op: str, record, pieces: int):
    import torch.distributed as dist

    n = dist.get_world_size()
    rank = dist.get_rank()
    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, not {op!r}")
    if not tensor.is_contiguous():
        raise ValueError("ring_all_reduce works in place on a contiguous tensor; call .contiguous() first")
    flat = tensor.view(-1)
    if record is not None:
        record.append(("input", -1, None, None, flat.detach().clone()))
    if n == 1:
        return tensor
    reduce_into = _reducer(op)
    right, left = (rank + 1) % n, (rank - 1) % n
    bounds = chunk_bounds(flat.numel(), n)
    biggest = max(b - a for a, b in bounds)
    # One receive buffer for the whole run, allocated once: no allocation inside the loop.
    scratch = flat.new_empty(biggest)
    for phase, step, who in ring_schedule(n):
        send_c, recv_c = who[rank]
        s0, s1 = bounds[send_c]
        r0, r1 = bounds[recv_c]
        if phase == "reduce-scatter":
            # Sub-split the chunk so that adding piece p (compute stream) overlaps receiving piece p + 1
            # (NCCL stream); under gloo pieces simply run one after the other.
            cuts = chunk_bounds(r1 - r0, pieces)
            scuts = chunk_bounds(s1 - s0, pieces)
            pending = []
            for (a, b), (sa, sb) in zip(cuts, scuts):
                works = _exchange(flat[s0 + sa:s0 + sb], right, scratch[a:b], left)
                pending.append((works, a, b))
            for works, a, b in pending:
                for w in works:
                    w.wait()
                if b > a:
                    reduce_into(flat[r0 + a:r0 + b], scratch[a:b])
        else:
            # Receive straight into place: the chunk arriving is final, nothing to add.
            for w in _exchange(flat[s0:s1], right, flat[r0:r1], left):
                w.wait()
        if record is not None:
            record.append((phase, step, send_c, recv_c, flat.detach().clone()))
    if op == "avg":
        if flat.is_floating_point():
            flat.div_(n)
        else:
            flat.floor_divide_(n)
    return tensor


def ring_all_reduce(tensor, op: str = "sum", pieces: int = 1):
    """All-reduce ``tensor`` in place over the default process group with a ring of isend/irecv.

    ``tensor``: contiguous, any shape and length (chunks may be uneven or empty); ``op``: one of
    :data:`REDUCE_OPS` ("avg" divides the sum by the world size; integer tensors floor-divide);
    ``pieces``: split each reduce-scatter chunk into this many messages so that the addition of one piece
    overlaps the transfer of the next. Returns ``tensor`` (now the same on every rank).
    Every rank must call it with tensors of the same length and dtype.
    """
    if pieces < 1:
        raise ValueError(f"pieces must be >= 1, got {pieces}")
    return _ring(tensor, op, None, pieces)


def ring_all_reduce_steps(tensor, op: str = "sum") -> list[tuple]:
    """Like :func:`ring_all_reduce`, and record this rank's tensor after every step.

    Returns ``[(phase, step, sent_chunk, received_chunk, flat_copy), ...]``: first ``("input", -1, None,
    None, x)``, then one entry per step of ``ring_schedule``. Meant for small tensors (it copies them).
    """
    record: list = []
    _ring(tensor, op, record, 1)
    return record


# ----------------------------------------------------------------------------------------------------------
# The collectives of the course, run by name: what the all-reduce results widget shows.

COLLECTIVES = ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter", "gather", "scatter")
ROOT = 0


def all_reduce_avg(tensor):
    """Average ``tensor`` (floating point) over all ranks in place and return it.

    ``ReduceOp.AVG`` for a CUDA tensor (NCCL carries it). A CPU tensor goes through gloo: SUM, then divide
    by the world size, because gloo rejects AVG in older torch versions and handles it for floating-point
    tensors only in recent ones, so the portable way is the one that works on every version.
    """
    import torch.distributed as dist

    if tensor.is_cuda:
        dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
    else:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor.div_(dist.get_world_size())
    return tensor


def run_collective(name: str, x, op: str = "sum"):
    """Run collective ``name`` with this rank's input ``x`` (a 1-D tensor on the rank's device).

    Returns this rank's output as a tensor, or None where the rank receives nothing (non-root ranks of
    reduce and gather). Conventions (the same in :func:`mgpu_helpers.widgets.allreduce.expected_outputs`):
    the root is rank 0; ``scatter`` splits the root's input into ``world_size`` equal pieces and
    ``reduce_scatter`` reduces, then gives rank r piece r (length must divide by the world size);
    ``all_gather`` and ``gather`` concatenate the inputs in rank order. ``op`` applies to reduce,
    all_reduce and reduce_scatter ("avg" on CPU tensors is SUM then divide, see :func:`all_reduce_avg`).
    """
    import torch
    import torch.distributed as dist

    n, rank = dist.get_world_size(), dist.get_rank()
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "prod": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}
    if op not in ops:
        raise ValueError(f"op must be one of {tuple(ops)}, not {op!r}")
    # CUDA tensors go through NCCL, which has AVG; CPU tensors through gloo: SUM, then divide.
    emulate_avg = op == "avg" and not x.is_cuda
    rop = dist.ReduceOp.SUM if emulate_avg else ops[op]

    def finish(t):
        return t.div_(n) if emulate_avg else t

    x = x.contiguous()
    if name == "broadcast":
        out = x.clone()
        dist.broadcast(out, src=ROOT)
        return out
    if name == "reduce":
        out = x.clone()
        dist.reduce(out, dst=ROOT, op=rop)
        return finish(out) if rank == ROOT else None
    if name == "all_reduce":
        out = x.clone()
        dist.all_reduce(out, op=rop)
        return finish(out)
    if name == "all_gather":
        parts = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(parts, x)   # the list form: every backend and torch version has it
        return torch.cat(parts)
    if name == "gather":
        parts = [torch.empty_like(x) for _ in range(n)] if rank == ROOT else None
        dist.gather(x, gather_list=parts, dst=ROOT)
        return torch.cat(parts) if rank == ROOT else None
    if x.numel() % n:
        raise ValueError(f"{name} needs a length divisible by world_size={n}, got {x.numel()}")
    if name == "scatter":
        out = x.new_empty(x.numel() // n)
        parts = list(x.chunk(n)) if rank == ROOT else None
        dist.scatter(out, scatter_list=parts, src=ROOT)
        return out
    if name == "reduce_scatter":
        out = x.new_empty(x.numel() // n)
        dist.reduce_scatter(out, list(x.chunk(n)), op=rop)
        return finish(out)
    raise ValueError(f"unknown collective {name!r}; one of {COLLECTIVES}")


def collective_rank_fn(rank: int, world_size: int, name: str, inputs, op: str = "sum"):
    """Rank function for ``run_ranks``: run ``name`` on ``inputs[rank]`` (list of lists), return the output
    as a plain list (None where the rank receives nothing)."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device
    x = torch.tensor(inputs[rank], device=rank_device())
    out = run_collective(name, x, op)
    return None if out is None else out.cpu().tolist()


def comm_share_speedup(share_before: float, share_after: float) -> float:
    """How much faster a step gets when communication drops from ``share_before`` to ``share_after`` of
    the step while the compute time stays the same (shares in [0, 1)).

    With compute ``C`` fixed, a step is ``C / (1 - share)``; e.g. 30% -> 10% gives 0.9 / 0.7 = 1.29x.
    """
    for s in (share_before, share_after):
        if not 0 <= s < 1:
            raise ValueError(f"a share of the step must be in [0, 1), got {s}")
    return (1 - share_after) / (1 - share_before)
