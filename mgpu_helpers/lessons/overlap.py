# Generated from solutions/13_overlap_ddp.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/13_overlap_ddp.ipynb (13 综合项目：让 All-Reduce 藏进 Backward).

Each block below is one `#| export` cell of that notebook, in order."""

import contextlib
import time

import torch
import torch.distributed as dist

import mgpu_helpers as mh

_MATMUL_S = {}  # device -> measured seconds of one 1024 x 1024 float32 matmul on it


def matmul_seconds(device, m: int = 1024) -> float:
    """Seconds one m x m float32 matmul takes on the GPU ``device``, timed once with CUDA events (median of 5)."""
    if device not in _MATMUL_S:
        a = torch.full((m, m), 0.5 / m, device=device)
        times = []
        for _ in range(6):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                a @ a
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / 20)
        _MATMUL_S[device] = sorted(times[1:])[2]  # the first run is a warm-up
    return _MATMUL_S[device]


class SlowBackward(torch.autograd.Function):
    """Identity on the way forward; on the way back it spends ``seconds`` before passing the gradient on.

    It stands in for the backward of a large layer, at a cost known in advance. On the CPU it sleeps (a
    sleeping process leaves the cores to gloo's threads, so timings compare on a busy laptop); on a GPU it
    queues real 1024 x 1024 matmuls on the current stream, as many as :func:`matmul_seconds` says fill
    ``seconds``: GPU work that NCCL's stream can run beside."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.seconds > 0 and grad.is_cuda:
            a = torch.full((1024, 1024), 0.5 / 1024, device=grad.device)
            for _ in range(max(1, round(ctx.seconds / matmul_seconds(grad.device)))):
                a @ a
        elif ctx.seconds > 0:
            mh.measure.workloads.sleep_units(1, ctx.seconds)
        return grad, None


class SlowLayer(torch.nn.Module):
    """A layer that costs ``seconds`` in backward and computes nothing."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        return SlowBackward.apply(x, self.seconds)


def make_model(widths=(7, 12, 5, 3), seconds_per_layer: float = 0.0, seed: int = 0, device="cpu"):
    """An MLP ``widths[0] -> ... -> widths[-1]``, each Linear followed by a :class:`SlowLayer`.

    The same ``seed`` gives the same weights on every rank and in a single process."""
    torch.manual_seed(seed)
    layers = []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [torch.nn.Linear(a, b), SlowLayer(seconds_per_layer)]
        if k < len(widths) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers).to(device)
    if seconds_per_layer > 0 and model[0].weight.is_cuda:
        matmul_seconds(model[0].weight.device)  # time the matmuls before any backward
    return model


def make_batch(widths, rows: int, step: int, seed: int = 1):
    """Step ``step``'s global batch ``(inputs, targets)``: the same on every rank and in one process."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return torch.randn(rows, widths[0], generator=g), torch.randn(rows, widths[-1], generator=g)


class NaiveDP:
    """Data parallelism done after the fact: backward first, then one blocking all-reduce per gradient."""

    def __init__(self, model, world_size: int, optimizer):
        self.params = list(model.parameters())
        self.world_size = world_size
        self.optimizer = optimizer

    def step(self):
        for p in self.params:
            dist.all_reduce(p.grad)  # blocking: nothing else happens meanwhile
            p.grad /= self.world_size  # sum -> mean
        self.optimizer.step()


def flat_params(model) -> "torch.Tensor":
    """Every parameter of ``model``, flattened into one CPU tensor (what two runs are compared by)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of the tensors an optimizer keeps per parameter (Adam: its two moments; SGD: none)."""
    return sum(
        v.numel() * v.element_size()
        for state in optimizer.state.values()
        for v in state.values()
        if torch.is_tensor(v) and v.dim() > 0
    )


def train_rank(
    rank,
    world_size,
    strategy,
    steps=3,
    widths=(7, 12, 5, 3),
    rows_per_rank=2,
    seconds_per_layer=0.0,
    lr=0.05,
    optimizer="sgd",
    options=None,
    record=True,
):
    """Rank function: ``steps`` training steps on this rank's rows of each global batch, synchronised by
    ``strategy(model, world_size, optimizer, **options)``, whose ``.step()`` runs after ``loss.backward()``.
    ``record``: record each collective's issue-to-completion span (:mod:`mgpu_helpers.measure.comm_spans`).

    Returns ``params`` (flat, after the last step), ``step_s`` (seconds of each step), ``spans`` (this run's
    backward and collective spans) and ``state_bytes`` (the optimizer state this rank keeps)."""
    device = mh.rank_device()
    model = make_model(widths, seconds_per_layer, device=device)
    make_opt = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    sync = strategy(model, world_size, make_opt(model.parameters(), lr=lr), **(options or {}))
    first = len(mh.trace.snapshot())
    step_s = []
    dist.barrier()  # start the first step together: a rank that starts late is not communication
    with mh.measure.comm_spans.recording() if record else contextlib.nullcontext():
        for step in range(steps):
            x, y = make_batch(widths, rows_per_rank * world_size, step)
            x, y = (t[rank * rows_per_rank : (rank + 1) * rows_per_rank].to(device) for t in (x, y))
            start = time.monotonic()
            for p in model.parameters():
                p.grad = None
            loss = torch.nn.functional.mse_loss(model(x), y)
            with mh.trace.span("compute", f"backward {step}"):
                loss.backward()
                if device.type == "cuda":  # the backward's kernels, not NCCL's own stream
                    torch.cuda.current_stream(device).synchronize()
            sync.step()
            mh.measure.timing.synchronize_device(device)
            step_s.append(time.monotonic() - start)
    return {
        "params": flat_params(model),
        "step_s": step_s,
        "spans": mh.trace.snapshot()[first:],
        "state_bytes": optimizer_state_bytes(sync.optimizer),
    }


def single_process_params(steps=3, widths=(7, 12, 5, 3), rows=4, lr=0.05, optimizer="sgd"):
    """The reference: the same steps in one process on the whole global batch of ``rows`` rows."""
    model = make_model(widths)
    make_opt = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    opt = make_opt(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = make_batch(widths, rows, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return flat_params(model)


def ddp_rank(rank, world_size, steps=3, widths=(7, 12, 5, 3), rows_per_rank=2, lr=0.05):
    """Rank function: the same training under torch's own DistributedDataParallel; returns the parameters."""
    device = mh.rank_device()
    model = make_model(widths, device=device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in range(steps):
        x, y = make_batch(widths, rows_per_rank * world_size, step)
        x, y = (t[rank * rows_per_rank : (rank + 1) * rows_per_rank].to(device) for t in (x, y))
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return flat_params(model)


def recorded_all_reduce_seconds(nbytes: int) -> float:
    """All-reduce seconds for ``nbytes`` on 2 x H200 (NVLink): the recorded nccl-tests in-place times
    (``mgpu_helpers/data/nccltests_all_reduce.txt``), linear between the two recorded sizes around it."""
    rows = [(r["nbytes"], r["inplace_time_us"] / 1e6) for r in mh.report.nccltests.load_reference("all_reduce")]
    if nbytes <= rows[0][0]:
        return rows[0][1]
    (b0, t0), (b1, t1) = next((lo, hi) for lo, hi in zip(rows, rows[1:]) if nbytes <= hi[0])
    return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)


def modelled_comm_share(widths, seconds_per_layer: float, linear_backward_s: float = 0.0, **_) -> dict:
    """The naive step's communication on 2 x H200 from the recorded figures: one float32 all-reduce per
    parameter after a backward of ``seconds_per_layer`` per layer plus the Linear layers' own
    ``linear_backward_s`` (forward and optimizer left out)."""
    numels = [n for a, b in zip(widths, widths[1:]) for n in (a * b, b)]
    comm = sum(recorded_all_reduce_seconds(4 * n) for n in numels)
    backward = seconds_per_layer * (len(widths) - 1) + linear_backward_s
    return {"grad_bytes": 4 * sum(numels), "comm_s": comm, "backward_s": backward, "share": comm / (comm + backward)}


def recorded_linear_backward_s() -> float:
    """The NCCL-size model's Linear layers' backward on one H200, recorded (``data/overlap_backward_h200.json``)."""
    return mh.report.recorded.read_json("overlap_backward_h200.json")["linear_backward_ms"] / 1e3


# The big model's sizes, by backend: gloo on the CPU (about 1 MiB a layer, 10 ms of sleep) and NCCL on GPUs
# (256 MiB a layer, so NVLink's all-reduces take a share of the step like gloo's do on the CPU).
BIG_SIZES = {
    "gloo": dict(widths=(256, 512, 512, 512, 512, 8), rows_per_rank=4, seconds_per_layer=0.01, steps=4),
    "nccl": dict(widths=(4096, 8192, 8192, 8192, 8192, 8), rows_per_rank=64, seconds_per_layer=0.001, steps=4),
}


class OverlapDP:
    """Each gradient's all-reduce starts the moment backward has finished accumulating it."""

    def __init__(self, model, world_size: int, optimizer):
        self.params = list(model.parameters())
        self.world_size = world_size
        self.optimizer = optimizer
        self.pending = []  # Work handles of the all-reduces in flight
        for p in self.params:
            p.register_post_accumulate_grad_hook(self.on_grad_ready)

    def on_grad_ready(self, p):
        """Called by autograd with the parameter whose ``p.grad`` was just accumulated."""
        self.pending.append(dist.all_reduce(p.grad, async_op=True))

    def step(self):
        """After ``loss.backward()``: wait for every all-reduce, turn sums into means, step the optimizer."""
        for work in self.pending:
            work.wait()
        self.pending.clear()
        for p in self.params:
            p.grad /= self.world_size
        self.optimizer.step()


def plan_buckets(numels, bucket_numel: int) -> list:
    """Parameter indices grouped into buckets, in the order backward produces them (last parameter first).

    A bucket closes as soon as it holds ``bucket_numel`` elements or more; a parameter larger than that
    closes the bucket it lands in (as DDP's buckets do); the last, partly filled bucket is kept.
    ``numels``: the number of elements of each parameter."""
    buckets, current, size = [], [], 0
    for i in reversed(range(len(numels))):
        current.append(i)
        size += numels[i]
        if size >= bucket_numel:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class BucketDP:
    """Gradients reduced bucket by bucket: a bucket's all-reduce starts when its last gradient is ready."""

    def __init__(self, model, world_size: int, optimizer, bucket_numel: int = 1 << 18, plan=None):
        self.params = list(model.parameters())
        self.world_size = world_size
        self.optimizer = optimizer
        self.buckets = (plan or plan_buckets)([p.numel() for p in self.params], bucket_numel)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.ready = [0] * len(self.buckets)  # gradients ready so far in each bucket, this step
        self.pending = []  # (work, flat buffer, bucket index) of the buckets in flight
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.on_grad_ready(i))

    def on_grad_ready(self, i: int):
        """Parameter ``i``'s gradient is ready; if it completes its bucket, start that bucket's all-reduce."""
        b = self.bucket_of[i]
        self.ready[b] += 1
        if self.ready[b] == len(self.buckets[b]):
            flat = torch.cat([self.params[j].grad.reshape(-1) for j in self.buckets[b]])
            self.pending.append((dist.all_reduce(flat, async_op=True), flat, b))

    def step(self):
        """Wait for every bucket, copy the averaged values back into each ``p.grad``, step the optimizer."""
        for work, flat, b in self.pending:
            work.wait()
            flat /= self.world_size
            offset = 0
            for j in self.buckets[b]:
                g = self.params[j].grad
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        self.pending.clear()
        self.ready = [0] * len(self.buckets)
        self.optimizer.step()


def overlap_fraction(spans) -> float:
    """Of the time the collectives ran (``communicate`` spans), the fraction inside a backward span
    (``compute`` spans named ``backward ...``); 0.0 when there was no communication."""
    backward = [(s.start, s.end) for s in spans if s.kind == "compute" and s.name.startswith("backward")]
    comm = [(s.start, s.end) for s in spans if s.kind == "communicate"]
    total = sum(end - start for start, end in comm)
    if total <= 0:
        return 0.0
    inside = sum(max(0.0, min(end, b_end) - max(start, b_start)) for start, end in comm for b_start, b_end in backward)
    return inside / total


class Zero1:
    """ZeRO stage 1: gradients reduce-scattered, each rank steps Adam on its shard, parameters all-gathered."""

    def __init__(self, model, world_size: int, optimizer, lr: float = 0.05):
        self.params = list(model.parameters())
        self.world_size = world_size
        self.rank = dist.get_rank()
        numel = sum(p.numel() for p in self.params)
        self.shard = -(-numel // world_size)  # ceil: the last shard is padded
        flat = torch.zeros(self.shard * world_size, device=self.params[0].device)
        flat[:numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.local = flat[self.rank * self.shard : (self.rank + 1) * self.shard].clone().requires_grad_(True)
        self.optimizer = torch.optim.Adam([self.local], lr=lr)  # state for this shard only
        del optimizer  # the full-model optimizer is not used

    def flat_grads(self):
        """All gradients in one tensor, zero-padded to ``shard * world_size`` elements."""
        flat = torch.zeros(self.shard * self.world_size, device=self.local.device)
        numel = sum(p.numel() for p in self.params)
        flat[:numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        return flat

    def step(self):
        """Reduce-scatter the gradients, step this rank's shard, all-gather the parameters back."""
        grad_shard = torch.empty(self.shard, device=self.local.device)
        dist.reduce_scatter_tensor(grad_shard, self.flat_grads())
        self.local.grad = grad_shard / self.world_size
        self.optimizer.step()
        full = torch.empty(self.shard * self.world_size, device=self.local.device)
        dist.all_gather_into_tensor(full, self.local.detach())
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(full[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
