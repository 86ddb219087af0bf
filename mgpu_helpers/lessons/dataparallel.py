"""Data-parallel training written out by hand: the four lines of the lesson, and the references it must match.

    local = shard(dataset, rank, world_size)      # 1. each rank owns a slice of the batch
    grads = backward(model, local)                # 2. local work only, no communication
    all_reduce(grads)                             # 3. every rank gets the same (averaged) gradient
    optimizer.step()                              # 4. ... and only reads it once the all-reduce is done

:func:`train_data_parallel` is a rank function (``run_ranks(train_data_parallel, n, args=(config,))``);
:func:`train_single_process` trains the same model on the whole batch in one process, and
:func:`train_ddp` lets ``torch.nn.parallel.DistributedDataParallel`` do step 3. All three start from the
same weights (seeded) and return the final parameters as one flat float64 CPU tensor, so they can be
compared with ``torch.allclose``.

Everything is float64: the three ways add the same numbers in a different order, and in float64 the
differences stay around 1e-15, far below the tolerance of the comparison, on the CPU and on GPUs alike.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass


@dataclass(frozen=True)
class TrainConfig:
    """A tiny regression problem: ``n_samples`` rows of ``n_features`` inputs, an MLP, SGD with momentum."""

    n_samples: int = 48
    n_features: int = 8
    hidden: int = 16
    steps: int = 5
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0


def make_dataset(config: TrainConfig = TrainConfig()):
    """The whole batch ``(x, y)``: float64 CPU tensors of shape (n_samples, n_features) and (n_samples, 1).

    Generated from ``config.seed``, so every rank can build it (or just its shard) without communication.
    """
    import torch

    g = torch.Generator().manual_seed(config.seed)
    x = torch.randn(config.n_samples, config.n_features, generator=g, dtype=torch.float64)
    w_true = torch.randn(config.n_features, 1, generator=g, dtype=torch.float64)
    y = torch.tanh(x @ w_true) + 0.1 * torch.randn(config.n_samples, 1, generator=g, dtype=torch.float64)
    return x, y


def make_model(config: TrainConfig = TrainConfig(), device="cpu"):
    """The MLP ``Linear(n_features, hidden) -> Tanh -> Linear(hidden, 1)`` with seeded float64 weights.

    Built on the CPU from the seed, then moved: every rank (and the single process) starts from the very
    same weights, whatever its device.
    """
    import torch

    g = torch.Generator().manual_seed(config.seed + 1)
    model = torch.nn.Sequential(torch.nn.Linear(config.n_features, config.hidden), torch.nn.Tanh(),
                                torch.nn.Linear(config.hidden, 1)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    return model.to(device)


def shard_range(n: int, rank: int, world_size: int) -> range:
    """The indices rank ``rank`` owns out of ``n``: contiguous, no overlap, sizes differ by at most one."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def shard(dataset, rank: int, world_size: int):
    """Rank ``rank``'s slice of ``dataset`` (a tensor, or a tuple of tensors cut along their first axis).

    Repeatable (the same call gives the same slice), without overlap, and balanced (sizes differ by at
    most one row). Together the shards of ranks 0..world_size-1 are the whole dataset, in order.
    """
    if isinstance(dataset, tuple):
        n = len(dataset[0])
        r = shard_range(n, rank, world_size)
        return tuple(t[r.start:r.stop] for t in dataset)
    r = shard_range(len(dataset), rank, world_size)
    return dataset[r.start:r.stop]


def flat_params(model):
    """All parameters of ``model`` as one flat float64 CPU tensor (detached)."""
    import torch

    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def allreduce_gradients(params, world_size: int, comm_stream=None) -> None:
    """Step 3 with its stream dependency made explicit: average the gradients of ``params`` over all ranks.

    The gradients are packed into one flat buffer (one collective instead of one per tensor, as DDP's
    buckets do), summed with ``all_reduce`` and divided by ``world_size``.

    On a GPU the all-reduce is queued on ``comm_stream`` (a side ``torch.cuda.Stream``) and two edges keep
    it correct: the side stream first waits for the compute stream (the gradients must be written before
    NCCL reads them), and the compute stream waits on an event recorded after the collective (the
    optimizer must not read the buffer before NCCL has written it). ``record_stream`` tells the caching
    allocator that the buffer is in use on the side stream, so its memory is not handed out again too early.
    On the CPU (gloo) there are no streams: ``work.wait()`` blocks until the result is in the buffer.
    The code path is the same; only the stream edges are skipped.
    """
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])          # on the compute (current) stream
    if flat.device.type == "cuda":
        compute = torch.cuda.current_stream(flat.device)
        comm = comm_stream if comm_stream is not None else torch.cuda.Stream(flat.device)
        comm.wait_stream(compute)                              # edge 1: gradients ready before the send
        with torch.cuda.stream(comm):
            flat.record_stream(comm)                           # buffer lifetime spans both streams
            work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
            work.wait()                                        # comm stream waits for NCCL (host does not)
            done = torch.cuda.Event()
            done.record(comm)
        # (work that does not touch `flat` could run here, overlapping the all-reduce)
        compute.wait_event(done)                               # edge 2: optimizer reads only after NCCL
    else:
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
        work.wait()                                            # gloo: the host blocks until it is done
    flat /= world_size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def train_data_parallel(rank: int, world_size: int, config: TrainConfig = TrainConfig(),
                        trace_steps: bool = False) -> dict:
    """Rank function: train the model by hand-written data parallelism; run it with ``run_ranks``.

    Returns ``{"rank", "device", "shard": (first, last+1), "params": flat float64 CPU tensor,
    "losses": local loss per step}``. With ``trace_steps`` each phase is recorded as a trace span.
    """
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    x, y = shard(make_dataset(config), rank, world_size)     # 1. shard: only this rank's rows
    x, y = x.to(device), y.to(device)
    model = make_model(config, device)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    comm_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    params = list(model.parameters())
    if trace_steps:
        _warm_up(model, x, y, device)
    phase = _traced_phase(device) if trace_steps else (lambda kind, name: nullcontext())
    losses = []
    for _ in range(config.steps):
        opt.zero_grad(set_to_none=False)
        with phase("compute", "backward"):
            loss = _loss(model, x, y)
            loss.backward()                                  # 2. local: gradient of the local shard only
        with phase("communicate", "all_reduce"):
            allreduce_gradients(params, world_size, comm_stream)   # 3. all-reduce (+ stream edges)
        with phase("other", "optimizer.step"):
            opt.step()                                       # 4. every rank applies the same update
        losses.append(float(loss.detach()))
    r = shard_range(config.n_samples, rank, world_size)
    return {"rank": rank, "device": str(device), "shard": (r.start, r.stop), "params": flat_params(model),
            "losses": losses}


def _warm_up(model, x, y, device) -> None:
    """One untimed backward and all-reduce, so that the first traced step does not carry one-time costs
    (loading the GPU kernels, creating the NCCL communicator). The gradients it leaves are zeroed by the
    first step's ``zero_grad``; the weights are not touched."""
    import torch
    import torch.distributed as dist

    from mgpu_helpers.measure.workloads import _sync

    _loss(model, x, y).backward()
    dist.all_reduce(torch.zeros(1, device=device))
    _sync(device)


def _traced_phase(device):
    """``phase(kind, name)``: a trace span that, on a GPU, waits for the queued work before it closes.

    CUDA kernels and NCCL calls return as soon as they are queued; without the synchronisation a span
    would measure the queueing, and the wait would land in whichever later line first reads a result.
    Only the traced run synchronises: the untraced loop keeps the GPU's queue full.
    """
    from mgpu_helpers.measure import trace
    from mgpu_helpers.measure.workloads import _sync

    @contextmanager
    def phase(kind: str, name: str):
        with trace.span(kind, name):
            yield
            _sync(device)
    return phase


def train_single_process(config: TrainConfig = TrainConfig(), device="cpu"):
    """The reference: one process, the whole batch, no communication. Returns the final flat parameters."""
    import torch

    x, y = make_dataset(config)
    x, y = x.to(device), y.to(device)
    model = make_model(config, device)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()
    return flat_params(model)


def train_ddp(rank: int, world_size: int, config: TrainConfig = TrainConfig()) -> dict:
    """Rank function: the same training with ``DistributedDataParallel`` doing the gradient all-reduce."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    x, y = shard(make_dataset(config), rank, world_size)
    x, y = x.to(device), y.to(device)
    model = make_model(config, device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        opt.zero_grad()
        _loss(ddp, x, y).backward()      # DDP all-reduces (averages) the gradients during backward
        opt.step()
    return {"rank": rank, "device": str(device), "params": flat_params(model)}


def train_both(rank: int, world_size: int, config: TrainConfig = TrainConfig()) -> dict:
    """Rank function: :func:`train_data_parallel` then :func:`train_ddp` in the same rank processes
    (one launch instead of two). Returns ``{"ours": ..., "ddp": ...}``."""
    return {"ours": train_data_parallel(rank, world_size, config), "ddp": train_ddp(rank, world_size, config)}


def local_gradient(rank: int, world_size: int, config: TrainConfig = TrainConfig()) -> dict:
    """Rank function: step 2 alone. The gradient of the mean loss over this rank's shard, at the initial
    weights, with no communication. Returns ``{"rank", "device", "rows", "loss", "grad"}`` (grad flat, CPU)."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    x, y = shard(make_dataset(config), rank, world_size)
    model = make_model(config, device)
    loss = _loss(model, x.to(device), y.to(device))
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return {"rank": rank, "device": str(device), "rows": len(x), "loss": float(loss.detach()), "grad": grad}


def full_gradient(config: TrainConfig = TrainConfig()):
    """The gradient of the mean loss over the whole batch at the initial weights (one process, CPU)."""
    import torch

    x, y = make_dataset(config)
    model = make_model(config)
    _loss(model, x, y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def stream_edge_demo(rank: int, world_size: int, numel: int = 1 << 22, with_edge: bool = True) -> float:
    """Rank function: all-reduce a buffer asynchronously, then read it at once (as the optimizer would).

    Every rank fills the buffer with ``rank + 1``; the all-reduced value is ``1 + 2 + ... + world_size``.
    With ``with_edge`` the reader waits for the collective first (GPU: the compute stream waits on an event
    recorded on the communication stream; CPU: ``work.wait()``); without it, it reads whatever is in the
    buffer at that moment. Returns the fraction of elements that already held the final sum (1.0 = all).
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    buf = torch.full((numel,), float(rank + 1), device=device)
    expected = world_size * (world_size + 1) / 2
    if device.type == "cuda":
        compute = torch.cuda.current_stream(device)
        comm = torch.cuda.Stream(device)
        comm.wait_stream(compute)
        with torch.cuda.stream(comm):
            work = dist.all_reduce(buf, async_op=True)
            work.wait()
            done = torch.cuda.Event()
            done.record(comm)
        if with_edge:
            compute.wait_event(done)
        snapshot = buf.clone()                 # the reader, on the compute stream
        torch.cuda.synchronize(device)
    else:
        work = dist.all_reduce(buf, async_op=True)
        if with_edge:
            work.wait()
        snapshot = buf.clone()                 # the reader
        work.wait()                            # (never leave a collective unfinished)
    return float((snapshot == expected).double().mean())


def max_difference(a, b) -> float:
    """Largest absolute difference between two flat parameter tensors."""
    return float((a - b).abs().max())
