# Generated from solutions/14_fsdp_at_scale.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/14_fsdp_at_scale.ipynb (14 FSDP2 与规模：参数也切开，从 2 个 Rank 想到 1,024 个).

Each block below is one `#| export` cell of that notebook, in order."""

import torch
import torch.distributed as dist

import mgpu_helpers as mh
from mgpu_helpers.lessons.overlap import make_batch, make_model

# FSDP2 and DTensor are imported inside the functions that use them: only the ranks need them, and importing
# them costs the notebook's kernel a second or more.

# The profiler's name for each collective FSDP2 issues (the same op under gloo and NCCL).
COLLECTIVE_EVENTS = {"all_gather": "c10d::_allgather_base_", "reduce_scatter": "c10d::_reduce_scatter_base_"}


def local_bytes(tensors) -> int:
    """Bytes this rank holds of ``tensors``: a DTensor counts its local shard only."""
    from torch.distributed.tensor import DTensor

    return sum((t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size() for t in tensors)


def whole_param_bytes(model) -> int:
    """Bytes of the parameters that are whole (unsharded) on this rank right now: FSDP2 swaps a module's
    sharded DTensors for plain tensors while it holds them gathered."""
    from torch.distributed.tensor import DTensor

    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def shard_model(model, mesh, reshard_after_forward: bool = True):
    """FSDP2: each Linear its own unit, then the whole model (the root)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def fsdp_rank(rank, world_size, steps=3, widths=(7, 12, 5, 3), rows_per_rank=2, lr=0.05, reshard_after_forward=True):
    """Rank function: 13's model under FSDP2, trained with Adam on this rank's rows of each global batch.

    Returns the first parameter's placements, each parameter's (global, local) shape, this rank's bytes of
    parameters, gradients and Adam state, the collectives per step, the most whole-parameter bytes held
    between a forward and its backward, and the trained parameters gathered whole (flat)."""
    from torch.distributed.device_mesh import init_device_mesh

    device = mh.rank_device()
    mesh = init_device_mesh(device.type, (world_size,))
    model = shard_model(make_model(widths, device=device), mesh, reshard_after_forward)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    mine = slice(rank * rows_per_rank, (rank + 1) * rows_per_rank)
    held = 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            x, y = make_batch(widths, rows_per_rank * world_size, step)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[mine].to(device)), y[mine].to(device))
            held = max(held, whole_param_bytes(model))
            loss.backward()
            optimizer.step()
    events = {e.key: e.count for e in prof.key_averages()}
    params = list(model.parameters())
    return {
        "placements": str(params[0].placements),
        "shapes": [(tuple(p.shape), tuple(p.to_local().shape)) for p in params],
        "param_bytes": local_bytes(params),
        "grad_bytes": local_bytes(p.grad for p in params),
        "state_bytes": local_bytes(
            v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0
        ),
        "per_step": {name: events.get(event, 0) // steps for name, event in COLLECTIVE_EVENTS.items()},
        "held_after_forward": held,
        "params": torch.cat([p.full_tensor().reshape(-1) for p in params]).cpu(),
    }


def local_slices(shape, mesh_shape, coords, shard_dims):
    """``[(start, length), ...]``, one per tensor dim: the part of a tensor of ``shape`` that the rank at mesh
    ``coords`` holds, mesh dim ``i`` (of ``mesh_shape[i]`` ranks) sharding tensor dim ``shard_dims[i]``
    (``None``: replicated along that mesh dim), split as ``torch.chunk`` splits."""
    # ✎ 从整条开始，沿网格维依次切：段长 ceil(length / N)，截到这一段的末尾
    spans = [(0, n) for n in shape]
    for size, coord, dim in zip(mesh_shape, coords, shard_dims):
        if dim is None:
            continue
        start, length = spans[dim]
        chunk = -(-length // size)
        lo = min(coord * chunk, length)
        spans[dim] = (start + lo, min(lo + chunk, length) - lo)
    return spans


SHARDED = {
    "dp": (),
    "zero1": ("optimizer",),
    "zero2": ("optimizer", "grads"),
    "zero3": ("optimizer", "grads", "params"),
}


def model_state_bytes(strategy: str, psi: float, world_size: int, k: float = 12) -> float:
    """Bytes of model states one rank holds (ZeRO paper, mixed precision): fp16 parameters 2 psi, fp16
    gradients 2 psi, optimizer state k psi, the parts ``strategy`` shards divided by ``world_size``."""
    # ✎ 三部分各多少字节？这个策略切开的那几部分除以 world_size
    parts = {"params": 2 * psi, "grads": 2 * psi, "optimizer": k * psi}
    return sum(size / world_size if part in SHARDED[strategy] else size for part, size in parts.items())


def big_model(d: int = 8192, blocks: int = 32, vocab: int = 50257):
    """A GPT-sized stack: an embedding, then ``blocks`` blocks of Linear(d, 4d) and Linear(4d, d)."""
    return torch.nn.Sequential(
        torch.nn.Embedding(vocab, d),
        *[torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)) for _ in range(blocks)],
    )


def fake_world(rank, world_size, sizes=(8, 64, 1024), fake_rank=0):
    """Rank function for one process: for each N in ``sizes``, a fake process group of N ranks in which this
    process is ``fake_rank``; :func:`big_model` on the meta device, sharded by FSDP2 (each block a unit).
    Returns, by N, the parameter count Ψ and the elements of this rank's parameter shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.destroy_process_group()  # the launcher's group: the fake one takes its place
    out = {}
    for n in sizes:
        dist.init_process_group("fake", store=FakeStore(), rank=fake_rank, world_size=n)
        mesh = init_device_mesh("cpu", (n,))
        with torch.device("meta"):
            model = big_model()
        for module in list(model)[1:]:
            fully_shard(module, mesh=mesh)
        fully_shard(model, mesh=mesh)
        params = list(model.parameters())
        out[n] = {
            "psi": sum(p.numel() for p in params),
            "local": sum(p.to_local().numel() for p in params),
            "placements": str(params[0].placements),
            "device": str(params[0].device),
        }
        dist.destroy_process_group()
    return out


from mgpu_helpers.lessons.cost_model import ring_all_gather_seconds, ring_reduce_scatter_seconds


def fsdp_step_seconds(
    psi,
    world_size,
    compute_1gpu_s,
    units,
    alpha,
    beta_node,
    beta_net,
    gpus_per_node=8,
    bytes_per_param=2,
    overlap=False,
):
    """One FSDP2 step in the alpha-beta model: per unit, two all-gathers of its parameters and one
    reduce-scatter of its gradients (``bytes_per_param`` each), on a ring whose slowest link is NVLink
    inside one node (``beta_node``) and the network beyond it (``beta_net``); plus compute split N ways."""
    beta = beta_node if world_size <= gpus_per_node else beta_net
    unit_bytes = psi * bytes_per_param / units
    comm = units * (
        2 * ring_all_gather_seconds(unit_bytes, world_size, alpha, beta)
        + ring_reduce_scatter_seconds(unit_bytes, world_size, alpha, beta)
    )
    compute = compute_1gpu_s / world_size
    return max(compute, comm) if overlap else compute + comm
