# Generated from solutions/09_code_walkthrough.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/09_code_walkthrough.ipynb (09 代码推演：把四条语句真正跑起来).

Each block below is one `#| export` cell of that notebook, in order."""

import mgpu_helpers as mh


def shard_range(n_items: int, rank: int, world_size: int) -> range:
    """The items rank ``rank`` owns out of ``n_items``: contiguous, no overlap, sizes differ by at most one.

    The first ``n_items % world_size`` ranks get one item more (as ``torch.tensor_split`` does).
    """
    ranges = mh.lessons.sharding_rules.contiguous_ranges(n_items, world_size)  # 06's rule, not a new one
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    return ranges[rank]


def shard(dataset, rank: int, world_size: int):
    """Rank ``rank``'s slice of ``dataset``: a tensor (or list), or a tuple of them cut alike on the first axis."""
    if isinstance(dataset, tuple):
        r = shard_range(len(dataset[0]), rank, world_size)
        return tuple(t[r.start : r.stop] for t in dataset)
    r = shard_range(len(dataset), rank, world_size)
    return dataset[r.start : r.stop]


def local_gradient(rank: int, world_size: int, config=None) -> dict:
    """Rank function, step 2 alone: the gradient of the mean loss over this rank's shard, at the initial
    weights, with no communication. Returns ``{"rank", "device", "rows", "loss", "grad"}`` (grad flat, CPU)."""
    import torch

    ref = mh.measure.dp_reference
    config = config or ref.TrainConfig()
    device = mh.rank_device()
    # ✎ x, y = ?（哪几行）；model = ?（哪组权重）；loss = ?；然后反向传播
    x, y = shard(ref.make_dataset(config), rank, world_size)
    model = ref.make_model(config, device)
    loss = ref.mse_loss(model, x.to(device), y.to(device))
    loss.backward()  # local: this rank's rows and this rank's replica only
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).cpu()
    return {"rank": rank, "device": str(device), "rows": len(x), "loss": float(loss.detach()), "grad": grad}


from dataclasses import dataclass


@dataclass
class PendingAllReduce:
    """An all-reduce that has been queued and that the reader has not waited for yet."""

    work: object  # the torch.distributed Work handle
    done: object = None  # GPU: a torch.cuda.Event recorded on the side stream after the collective
    device: object = None  # GPU: the buffer's device

    def wait(self) -> None:
        """Edge 2: make the reader wait. GPU: the current stream waits on ``done`` (the host goes on);
        CPU (gloo): the host blocks until the result is in the buffer."""
        import torch

        if self.done is None:
            self.work.wait()
        else:
            torch.cuda.current_stream(self.device).wait_event(self.done)


def all_reduce_on_side_stream(buf, comm_stream=None) -> PendingAllReduce:
    """Queue a SUM all-reduce of ``buf`` (in place) on a side stream and return at once.

    GPU: the side stream first waits for the current (compute) stream (edge 1: ``buf`` is written before
    NCCL reads it); inside it, NCCL's own stream waits on the side stream, ``work.wait()`` makes the side
    stream wait for NCCL, and an event marks the end. Call ``.wait()`` on the result before reading ``buf``
    (edge 2). CPU (gloo): no streams; ``.wait()`` blocks the host.
    """
    import torch
    import torch.distributed as dist

    if buf.device.type != "cuda":
        return PendingAllReduce(dist.all_reduce(buf, op=dist.ReduceOp.SUM, async_op=True))
    compute = torch.cuda.current_stream(buf.device)
    side = comm_stream if comm_stream is not None else torch.cuda.Stream(buf.device)
    side.wait_stream(compute)  # edge 1: what compute wrote into buf is finished
    with torch.cuda.stream(side):
        buf.record_stream(side)  # buf is in use on side: the allocator must wait for it
        work = dist.all_reduce(buf, op=dist.ReduceOp.SUM, async_op=True)  # NCCL's stream waits on side
        work.wait()  # side waits for NCCL's stream; the host does not
        done = torch.cuda.Event()
        done.record(side)
    return PendingAllReduce(work, done, buf.device)


def allreduce_gradients(params, world_size: int, comm_stream=None) -> None:
    """Step 3: replace every ``p.grad`` of ``params`` by its average over all ranks.

    The gradients go into one flat buffer (one collective instead of one per tensor, as DDP's buckets do),
    are summed by :func:`all_reduce_on_side_stream` and divided by ``world_size``.
    """
    import torch

    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])  # on the compute (current) stream
    pending = all_reduce_on_side_stream(flat, comm_stream)
    # (work that does not touch `flat` could be queued here and overlap the all-reduce)
    pending.wait()  # edge 2: read flat only after NCCL wrote it
    mh.lessons.ring.divide_by_world_size(flat)  # SUM -> mean, as 05 wrote it
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def stream_edge_demo(rank: int, world_size: int, numel: int = 1 << 22, with_edge: bool = True) -> float:
    """Rank function: all-reduce a buffer on a side stream, then read it at once (as the optimizer would).

    Every rank fills the buffer with ``rank + 1``; the all-reduced value is ``1 + 2 + ... + world_size``.
    With ``with_edge`` the reader waits for the collective first (edge 2); without it, it reads whatever
    the buffer holds at that moment. Returns the fraction of elements that already held the sum (1.0 = all).
    """
    import torch

    device = mh.rank_device()
    buf = torch.full((numel,), float(rank + 1), device=device)
    expected = world_size * (world_size + 1) / 2
    pending = all_reduce_on_side_stream(buf)
    if with_edge:
        pending.wait()
    snapshot = buf.clone()  # the reader, on the current stream
    pending.wait()  # never leave a collective unfinished
    mh.measure.timing.synchronize_device(device)
    return float((snapshot == expected).double().mean())


SEED_CALL = "ncclAllReduce(grad, grad, count, ncclFloat, ncclSum, communicator, stream)"
CUPY_CALL = "communicator.allReduce(sendbuf, recvbuf, count, datatype, op, stream)"
# The seed's arguments, in order, and the CuPy parameter each one becomes (the communicator is the object).
SEED_TO_CUPY = [
    ("grad", "sendbuf"),
    ("grad", "recvbuf"),
    ("count", "count"),
    ("ncclFloat", "datatype"),
    ("ncclSum", "op"),
    ("communicator", None),
    ("stream", "stream"),
]
# Values of the enums in nccl.h (ncclDataType_t, ncclRedOp_t); on a GPU they are checked against CuPy's.
NCCL_DATATYPES = {"float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
NCCL_SUM = 0


def call_arguments(call: str) -> list[str]:
    """The argument names of a call written as text: ``"f(a, b)"`` -> ``["a", "b"]``."""
    inside = call[call.index("(") + 1 : call.rindex(")")]
    return [a.strip() for a in inside.split(",")]


def nccl_arguments(tensor, stream_ptr: int) -> tuple:
    """CuPy's ``allReduce`` arguments for an in-place SUM all-reduce of ``tensor`` on the stream ``stream_ptr``:
    ``(sendbuf, recvbuf, count, datatype, op, stream)``, in that order."""
    dtype = str(tensor.dtype).replace("torch.", "")
    if dtype not in NCCL_DATATYPES:
        raise ValueError(f"no NCCL datatype for {tensor.dtype}; use one of {sorted(NCCL_DATATYPES)}")
    # ✎ sendbuf, recvbuf, count, datatype, op, stream：各是什么数？
    address = tensor.data_ptr()
    return (address, address, tensor.numel(), NCCL_DATATYPES[dtype], NCCL_SUM, stream_ptr)


def cupy_nccl_available() -> bool:
    """True when CuPy is installed with its NCCL binding loaded (it needs libnccl, which GPU builds of torch bring)."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return False
    return bool(getattr(nccl, "available", False)) and hasattr(nccl, "NcclCommunicator")


def cupy_nccl_all_reduce(rank: int, world_size: int, count: int = 1 << 20) -> dict:
    """Rank function (one rank per GPU): the seed's ``ncclAllReduce`` through ``cupy.cuda.nccl``, checked
    element by element against ``torch.distributed.all_reduce`` of the same gradient."""
    import cupy
    import torch
    import torch.distributed as dist
    from cupy.cuda import nccl

    if (NCCL_DATATYPES["float32"], NCCL_SUM) != (nccl.NCCL_FLOAT32, nccl.NCCL_SUM):
        raise RuntimeError("this CuPy's NCCL enums differ from nccl.h's: update NCCL_DATATYPES / NCCL_SUM")
    device = mh.rank_device()
    cupy.cuda.Device(device.index).use()
    uid = [nccl.get_unique_id() if rank == 0 else None]  # rank 0 makes the id ...
    dist.broadcast_object_list(uid, src=0)  # ... and every rank receives it
    communicator = nccl.NcclCommunicator(world_size, uid[0], rank)
    g = torch.Generator().manual_seed(rank)
    grad = torch.randint(-50, 51, (count,), generator=g).to(device, torch.float32)  # whole numbers: exact sums
    reference = grad.clone()
    compute = torch.cuda.current_stream(device)
    with cupy.cuda.ExternalStream(compute.cuda_stream, device.index):  # CuPy's current stream = torch's
        stream = cupy.cuda.get_current_stream().ptr
        communicator.allReduce(*nccl_arguments(grad, stream))  # the seed's line 03
    dist.all_reduce(reference)  # the same sum through torch
    torch.cuda.synchronize(device)
    communicator.destroy()
    return {
        "rank": rank,
        "device": str(device),
        "nccl_version": nccl.get_version(),
        "count": count,
        "same_stream_as_torch": stream == compute.cuda_stream,
        "equal_to_torch": bool(torch.equal(grad, reference)),
        "first": float(grad[0]),
    }


def train_data_parallel(rank: int, world_size: int, config=None, trace_steps: bool = False) -> dict:
    """Rank function: train by hand-written data parallelism; run it with ``mh.run_ranks``.

    Returns ``{"rank", "device", "shard": (first, last+1), "params": flat float64 CPU tensor,
    "losses": local loss per step}``. With ``trace_steps`` each phase is recorded as a trace span.
    """
    import torch

    ref = mh.measure.dp_reference
    config = config or ref.TrainConfig()
    device = mh.rank_device()
    mark = mh.measure.profile.marked_range  # NVTX on a GPU, record_function everywhere
    with mark("shard", device):
        x, y = shard(ref.make_dataset(config), rank, world_size)  # 1. SHARD: only this rank's rows
        x, y = x.to(device), y.to(device)
    model = ref.make_model(config, device)  # the same initial weights everywhere
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    params = list(model.parameters())
    if trace_steps:
        ref.warm_up(model, x, y, device)  # one-time costs out of the first traced step
    phase = ref.traced_phase(device, enabled=trace_steps)
    losses = []
    for _ in range(config.steps):
        opt.zero_grad(set_to_none=False)
        with mark("backward", device), phase("compute", "backward"):
            loss = ref.mse_loss(model, x, y)
            loss.backward()  # 2. LOCAL: no communication
        with mark("all_reduce", device), phase("communicate", "all_reduce"):
            allreduce_gradients(params, world_size, side)  # 3. REDUCE, 4. STREAM edges
        with mark("step", device), phase("other", "optimizer.step"):
            opt.step()  # the same update on every rank
        losses.append(float(loss.detach()))
    r = shard_range(config.n_samples, rank, world_size)
    return {
        "rank": rank,
        "device": str(device),
        "shard": (r.start, r.stop),
        "params": ref.flat_params(model),
        "losses": losses,
    }
