"""Memory each rank needs under a parallel strategy, against one GPU's capacity, and the bytes it sends per step.
Sizes are of the whole job, in one unit for all (e.g. GB): parameters, gradients, optimizer state, activations."""

from dataclasses import dataclass

from mgpu_helpers.models.bandwidth import BUSBW_FACTORS, check_world_size

PARTS = ("params", "grads", "optimizer", "activations")
# How the lessons name them.
PART_ZH = {"params": "参数", "grads": "梯度", "optimizer": "优化器状态", "activations": "激活"}

# For each strategy: which parts are split across ranks (the rest is replicated: every rank holds all of it).
STRATEGIES = {"replicate": (), "data_parallel": ("activations",), "tensor_parallel": ("params", "grads", "optimizer")}
STRATEGIES |= {"pipeline_parallel": PARTS, "zero1": ("optimizer", "activations")}
STRATEGIES |= {"zero2": ("optimizer", "grads", "activations"), "zero3": PARTS, "unified_memory": ()}

STRATEGY_NOTES = {
    "replicate": "every rank holds a full copy of everything; adding ranks adds no capacity",
    "data_parallel": "model, gradients and optimizer state replicated; only the batch (activations) is split",
    "tensor_parallel": "each layer's weights split by width; activations at layer boundaries stay whole "
    "(simplified: counted as replicated)",
    "pipeline_parallel": "layers split by depth; each stage keeps its layers' state and activations "
    "(simplified: micro-batches in flight ignored)",
    "zero1": "data parallel, optimizer state sharded (ZeRO stage 1)",
    "zero2": "data parallel, optimizer state and gradients sharded (ZeRO stage 2)",
    "zero3": "data parallel, parameters, gradients and optimizer state sharded (ZeRO stage 3 / FSDP)",
    "unified_memory": "nothing is split: pages that do not fit stay elsewhere (host memory, or a peer GPU's "
    "memory) and migrate or are read remotely on demand, over PCIe or NVLink: it runs, slowly",
}


@dataclass(frozen=True)
class RankMemory:
    rank: int
    params: float
    grads: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations


@dataclass(frozen=True)
class MemoryPlan:
    strategy: str
    capacity: float
    ranks: tuple
    replicated: tuple
    sharded: tuple
    note: str

    @property
    def totals(self) -> list:
        return [r.total for r in self.ranks]

    @property
    def rank_fits(self) -> list:
        return [t <= self.capacity * (1 + 1e-12) for t in self.totals]

    @property
    def fits(self) -> bool:
        """Every rank fits in its own GPU's memory (the capacity is per GPU: memories are not merged)."""
        return all(self.rank_fits)

    @property
    def oversubscribed(self) -> list:
        """Per rank, how much exceeds the capacity (0 where it fits): what unified memory keeps elsewhere."""
        return [max(0.0, t - self.capacity) for t in self.totals]

    @property
    def imbalance(self) -> float:
        """max / mean of the per-rank totals (1.0: balanced)."""
        mean = sum(self.totals) / len(self.totals)
        return max(self.totals) / mean if mean > 0 else 1.0


def memory_plan(strategy, world_size, capacity, params=0.0, grads=0.0, optimizer=0.0, activations=0.0, weights=None):
    """The :class:`MemoryPlan` of ``world_size`` ranks under ``strategy`` against a per-GPU ``capacity``; sharded
    parts are split in proportion to ``weights`` (one number per rank, default equal), replicated ones held whole."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {sorted(STRATEGIES)}")
    check_world_size(world_size)
    weights = [1.0] * world_size if weights is None else weights
    if len(weights) != world_size or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be {world_size} non-negative numbers with a positive sum, got {weights!r}")
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"sizes must be >= 0, got {sizes}")
    sharded = STRATEGIES[strategy]
    total = float(sum(weights))
    share = [w / total for w in weights]
    ranks = [
        RankMemory(r, **{p: sizes[p] * share[r] if p in sharded else sizes[p] for p in PARTS})
        for r in range(world_size)
    ]
    held = [p for p in PARTS if sizes[p] > 0]
    replicated, split = tuple(p for p in held if p not in sharded), tuple(p for p in held if p in sharded)
    return MemoryPlan(strategy, capacity, tuple(ranks), replicated, split, STRATEGY_NOTES[strategy])


# The collectives each strategy runs in one training step, as (collective, part it moves); what a ring sends of
# each is its busbw factor.
STEP_COLLECTIVES = {
    "replicate": (),
    "data_parallel": (("all_reduce", "grads"),),
    # ZeRO-1/2: the gradient all-reduce split in its two halves, the all-gather moved after the update
    "zero1": (("reduce_scatter", "grads"), ("all_gather", "params")),
    "zero2": (("reduce_scatter", "grads"), ("all_gather", "params")),
    # ZeRO-3: the parameters are gathered layer by layer twice (forward and backward), gradients scattered
    "zero3": (("all_gather", "params"), ("all_gather", "params"), ("reduce_scatter", "grads")),
}
# Strategies whose traffic is activations or pages, which these four sizes cannot tell.
STEP_NOT_MODELLED = {
    "tensor_parallel": "activations all-reduced inside every layer: depends on the layer shapes and the batch",
    "pipeline_parallel": "activations sent from stage to stage: depends on the micro-batches",
    "unified_memory": "pages migrate on demand: depends on the access pattern",
}


def step_bytes_sent(strategy: str, world_size: int, params: float = 0.0, grads: float = 0.0):
    """What each rank sends in one training step under ``strategy`` (ring collectives), in the unit of the sizes;
    ``None`` where these sizes cannot tell (:data:`STEP_NOT_MODELLED`)."""
    if strategy in STEP_NOT_MODELLED:
        return None
    if strategy not in STEP_COLLECTIVES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {sorted(STRATEGIES)}")
    check_world_size(world_size)
    sizes = dict(params=params, grads=grads)
    return float(sum(BUSBW_FACTORS[op](world_size) * sizes[part] for op, part in STEP_COLLECTIVES[strategy]))


@dataclass(frozen=True)
class StrategyRow:
    """One strategy of :func:`compare_strategies`: its plan, the largest rank's memory and the bytes per step."""

    strategy: str
    plan: MemoryPlan
    peak: float
    fits: bool
    step_bytes: float | None


def compare_strategies(world_size, capacity, params=0.0, grads=0.0, optimizer=0.0, activations=0.0, weights=None):
    """One :class:`StrategyRow` per strategy of :data:`STRATEGIES` on one job (``weights`` as in :func:`memory_plan`)."""
    plans = [memory_plan(s, world_size, capacity, params, grads, optimizer, activations, weights) for s in STRATEGIES]
    sent = [step_bytes_sent(p.strategy, world_size, params, grads) for p in plans]
    return [StrategyRow(p.strategy, p, max(p.totals), p.fits, b) for p, b in zip(plans, sent)]
