# Generated from solutions/05_collectives.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/05_collectives.ipynb (05 集合通信：所有进程一起干活).

Each block below is one `#| export` cell of that notebook, in order."""

import mgpu_helpers as mh

# The reduce ops by the names this lesson gives them: sum, avg, max, min, prod (one list for the course).
REDUCE_OPS = mh.models.collectives.REDUCE_OPS


def portable_op(op: str, tensor):
    """The ``ReduceOp`` to call for ``op`` on ``tensor``, and whether the result must still be divided.

    "avg" on a CUDA tensor of a group whose CUDA backend is NCCL is NCCL's own ``AVG``; anywhere else (gloo,
    for CPU tensors or CUDA ones) it becomes ``SUM``, and the caller divides by the world size afterwards
    (:func:`divide_by_world_size`): gloo refuses ``AVG`` in older torch versions and takes it for
    floating-point tensors only in newer ones, while SUM works everywhere. Returns ``(reduce_op, divide_after)``.
    """
    import torch.distributed as dist

    ops = {
        "sum": dist.ReduceOp.SUM,
        "avg": dist.ReduceOp.AVG,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "prod": dist.ReduceOp.PRODUCT,
    }
    if op not in ops:
        raise ValueError(f"op must be one of {REDUCE_OPS}, not {op!r}")
    if op == "avg" and not (tensor.is_cuda and "nccl" in str(dist.get_backend())):
        return dist.ReduceOp.SUM, True
    return ops[op], False


def divide_by_world_size(tensor):
    """SUM -> average, in place: floating point divides, integers floor-divide (as NCCL's AVG keeps integers)."""
    import torch.distributed as dist

    world_size = dist.get_world_size()
    return tensor.div_(world_size) if tensor.is_floating_point() else tensor.floor_divide_(world_size)


def all_reduce_avg(tensor):
    """Average ``tensor`` over all ranks in place and return it: AVG where the backend has it, else SUM
    then divide."""
    import torch.distributed as dist

    reduce_op, divide_after = portable_op("avg", tensor)
    dist.all_reduce(tensor, op=reduce_op)
    return divide_by_world_size(tensor) if divide_after else tensor


def chunk_bounds(length: int, world_size: int) -> list[tuple[int, int]]:
    """Split ``range(length)`` into ``world_size`` contiguous chunks whose sizes differ by at most one.

    Returns ``[(start, stop), ...]``, one per chunk; like ``torch.tensor_split``, the first
    ``length % world_size`` chunks get one element more, and chunks are empty when ``length < world_size``.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    base, extra = divmod(length, world_size)
    bounds, start = [], 0
    for chunk in range(world_size):
        stop = start + base + (1 if chunk < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(world_size: int) -> list[tuple[str, int, list[tuple[int, int]]]]:
    """Which chunk each rank sends and receives at every step: ``[(phase, step, [(send, recv) per rank])]``.

    Reduce-scatter step ``s``: rank ``r`` sends chunk ``(r - s) % world_size`` to the right and receives
    chunk ``(r - s - 1) % world_size`` from the left, adding it to its own; after ``world_size - 1`` steps
    rank ``r`` holds the finished chunk ``(r + 1) % world_size``. All-gather step ``s`` sends chunk
    ``(r + 1 - s) % world_size`` and receives ``(r - s) % world_size``, copying instead of adding.
    """
    plan = []
    for s in range(world_size - 1):
        plan.append(
            ("reduce-scatter", s, [((r - s) % world_size, (r - s - 1) % world_size) for r in range(world_size)])
        )
    for s in range(world_size - 1):
        plan.append(("all-gather", s, [((r + 1 - s) % world_size, (r - s) % world_size) for r in range(world_size)]))
    return plan


import mgpu_helpers as mh


def reduce_into(op: str):
    """``add(acc, got)``: combine the chunk ``got`` that arrived into ``acc``, in place, for ``op``."""
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


def ring_all_reduce(tensor, op: str = "sum", pieces: int = 1, record: list | None = None):
    """All-reduce ``tensor`` in place over the default process group with a ring of isend/irecv; return it.

    ``tensor``: contiguous, any shape and length (chunks may be uneven or empty); ``op``: one of
    :data:`REDUCE_OPS` ("avg" divides the sum by the world size; integers floor-divide); ``pieces``: cut
    each reduce-scatter chunk into this many messages, so that adding one piece overlaps receiving the
    next; ``record``: a list to which ``(phase, step, sent_chunk, received_chunk, copy_of_tensor)`` is
    appended after every step (small tensors only: it copies). Every rank calls it with the same length
    and dtype.
    """
    import torch.distributed as dist

    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, not {op!r}")
    if pieces < 1:
        raise ValueError(f"pieces must be >= 1, got {pieces}")
    if not tensor.is_contiguous():
        raise ValueError("ring_all_reduce works in place on a contiguous tensor; call .contiguous() first")
    exchange = mh.lessons.p2p.exchange  # notebook 04's step: one send and one receive, posted together
    world_size, rank = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1)
    if record is not None:
        record.append(("input", -1, None, None, flat.detach().clone()))
    if world_size == 1:
        return tensor
    combine = reduce_into(op)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    bounds = chunk_bounds(flat.numel(), world_size)
    # One receive buffer for the whole run, allocated once: nothing is allocated inside the loop.
    scratch = flat.new_empty(max(stop - start for start, stop in bounds))
    for phase, step, who in ring_schedule(world_size):
        send_chunk, recv_chunk = who[rank]
        s0, s1 = bounds[send_chunk]
        r0, r1 = bounds[recv_chunk]
        if phase == "reduce-scatter":
            # Post every piece first, then add them as they arrive: on a GPU the addition of piece p
            # (compute stream) overlaps the transfer of piece p + 1 (NCCL's stream).
            posted = []
            for (a, b), (sa, sb) in zip(chunk_bounds(r1 - r0, pieces), chunk_bounds(s1 - s0, pieces)):
                posted.append((exchange(flat[s0 + sa : s0 + sb], right, scratch[a:b], left), a, b))
            for requests, a, b in posted:
                for request in requests:
                    request.wait()
                if b > a:
                    combine(flat[r0 + a : r0 + b], scratch[a:b])
        else:
            # The chunk arriving is final: receive it straight into place, nothing to add.
            for request in exchange(flat[s0:s1], right, flat[r0:r1], left):
                request.wait()
        if record is not None:
            record.append((phase, step, send_chunk, recv_chunk, flat.detach().clone()))
    if op == "avg":
        divide_by_world_size(flat)
    return tensor


def ring_all_reduce_steps(tensor, op: str = "sum") -> list[tuple]:
    """:func:`ring_all_reduce` that returns what this rank held after every step (for the step picture)."""
    record: list = []
    ring_all_reduce(tensor, op, record=record)
    return record
