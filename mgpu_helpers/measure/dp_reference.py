"""What notebook 09 (hand-written data parallelism) does not teach: the problem, the references its training
must equal, and the timing of a step's phases. Everything is float64: the ways of training add the same numbers in
a different order, and in float64 the differences stay around 1e-15, far below the comparisons' tolerance."""

from contextlib import contextmanager
from dataclasses import dataclass

from mgpu_helpers.launcher import trace
from mgpu_helpers.measure.timing import synchronize_device


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
    """The whole batch ``(x, y)``, from ``config.seed``: every rank builds it without communication."""
    import torch

    g = torch.Generator().manual_seed(config.seed)
    x = torch.randn(config.n_samples, config.n_features, generator=g, dtype=torch.float64)
    w_true = torch.randn(config.n_features, 1, generator=g, dtype=torch.float64)
    y = torch.tanh(x @ w_true) + 0.1 * torch.randn(config.n_samples, 1, generator=g, dtype=torch.float64)
    return x, y


def make_model(config: TrainConfig = TrainConfig(), device="cpu"):
    """The MLP, built on the CPU from the seed, then moved: every rank starts from the same weights on any device."""
    import torch

    g = torch.Generator().manual_seed(config.seed + 1)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(config.n_features, config.hidden), nn.Tanh(), nn.Linear(config.hidden, 1)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    return model.to(device)


def mse_loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def flat_params(model):
    import torch

    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def max_difference(a, b) -> float:
    return float((a - b).abs().max())


def train_single_process(config: TrainConfig = TrainConfig(), device="cpu"):
    """The reference: one process, the whole batch, no communication. Returns the final flat parameters."""
    x, y = make_dataset(config)
    model = make_model(config, device)
    _train(model, x.to(device), y.to(device), config)
    return flat_params(model)


def _train(model, x, y, config: TrainConfig) -> None:
    """``config.steps`` steps of SGD with momentum (``model`` may be a DDP wrapper, which averages the gradients)."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        opt.zero_grad()
        mse_loss(model, x, y).backward()
        opt.step()


def full_gradient(config: TrainConfig = TrainConfig()):
    """The gradient of the whole batch's mean loss at the initial weights (one process, CPU)."""
    import torch

    x, y = make_dataset(config)
    model = make_model(config)
    mse_loss(model, x, y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def train_ddp(rank: int, world_size: int, config: TrainConfig, shard) -> dict:
    """Rank function: the training under DDP; pass notebook 09's ``shard``, so both loops see the same shards."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    x, y = shard(make_dataset(config), rank, world_size)
    model = make_model(config, device)
    _train(DDP(model, device_ids=[device.index] if device.type == "cuda" else None), x.to(device), y.to(device), config)
    return {"rank": rank, "device": str(device), "params": flat_params(model)}


def warm_up(model, x, y, device) -> None:
    """One untimed backward and all-reduce, so the first timed step carries no one-time costs (kernels loading,
    the NCCL communicator). The caller's next ``zero_grad`` clears the gradients it leaves."""
    import torch
    import torch.distributed as dist

    mse_loss(model, x, y).backward()
    dist.all_reduce(torch.zeros(1, device=device))
    synchronize_device(device)


def traced_phase(device, enabled: bool = True):
    """``phase(kind, name)``: a trace span that on a GPU waits for the queued work before closing (else it measures
    the queueing); ``enabled=False`` records and waits for nothing, so an untraced loop keeps the GPU's queue full."""

    @contextmanager
    def phase(kind: str, name: str):
        if not enabled:
            yield
            return
        with trace.span(kind, name):
            yield
            synchronize_device(device)

    return phase
