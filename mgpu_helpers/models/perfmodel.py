"""Pure performance arithmetic (no I/O, no torch): bandwidth formulas, cost models, memory per rank, sharding.

Public API (names are stable; notebooks 06-12 call them):

- Bandwidth: ``algbw(nbytes, seconds)``, ``busbw(op, nbytes, seconds, world_size)``.
- Ring alpha-beta costs (seconds): ``ring_allreduce_seconds(nbytes, n, alpha, beta)``,
  ``ring_reduce_scatter_seconds(...)``, ``ring_all_gather_seconds(...)``,
  ``collective_seconds(op, nbytes, n, alpha, beta)``; fitting: ``fit_alpha_beta(op, nbytes, seconds, n,
  relative=False) -> (alpha, beta)``.
- Bytes: ``bytes_sent_per_rank(op, nbytes, n)``, ``result_bytes_per_rank(op, nbytes, n, rank=0, root=0)``,
  ``collective_table(nbytes, n)``.
- Step time and scaling: ``step_seconds(compute_seconds, n, comm_seconds=0, overhead_seconds=0)``,
  ``straggler_step_seconds(shard_costs, seconds_per_unit, comm_seconds=0)``, ``speedup(t1, tn)``,
  ``strong_scaling_efficiency(t1, tn, n)``, ``weak_scaling_efficiency(t1, tn)``,
  ``strong_scaling(compute_seconds, ns, nbytes, alpha, beta)``, ``weak_scaling(compute_per_rank_seconds,
  ns, nbytes, alpha, beta)``, ``slower_with_one_more(compute_seconds, n, nbytes, alpha, beta)``.
- Memory: ``memory_plan(strategy, n, capacity, params=0, grads=0, optimizer=0, activations=0,
  weights=None) -> MemoryPlan`` (strategies in ``STRATEGIES``; ``MemoryPlan.ranks`` of ``RankMemory``,
  ``.fits``, ``.replicated``, ``.oversubscribed``, ``.imbalance``, ``.summary()``).
- Sharding: ``shard(items, rank, world_size, costs=None, method="lpt")``, ``shard_ranges(n_items,
  world_size)``, ``balanced_shards(costs, world_size, method="lpt"|"contiguous")``, ``shard_loads(costs,
  shards)``.

Bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md): ``algbw = bytes / time``, and ``busbw`` scales
algbw by the fraction of the data each rank must move over its links, so that busbw is comparable with the
link bandwidth whatever the number of ranks:

=================  ================================
all_reduce         busbw = algbw * 2 (n - 1) / n
reduce_scatter     busbw = algbw * (n - 1) / n
all_gather         busbw = algbw * (n - 1) / n
broadcast, reduce  busbw = algbw
send/recv          busbw = algbw
=================  ================================

For all_gather and reduce_scatter, ``nbytes`` is the size of the whole (gathered / unreduced) buffer,
as nccl-tests counts it.
"""
from __future__ import annotations

from dataclasses import dataclass

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second: the message size over the time of the operation."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes per second, by the nccl-tests formulas (see the module docstring)."""
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {op!r}; one of {sorted(BUSBW_FACTORS)}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return algbw(nbytes, seconds) * BUSBW_FACTORS[op](world_size)


# --------------------------------------------------------------------------------------------------------
# The alpha-beta cost of ring collectives.
#
# A message of b bytes between two ranks costs ``alpha + b * beta``: alpha is the fixed cost of one step
# (launch, synchronisation, link latency), beta the seconds per byte (1 / link bandwidth). A ring of n ranks
# splits the buffer into n chunks and runs n - 1 steps per phase; each step moves one chunk per rank.
# ``nbytes`` follows nccl-tests: the buffer on each rank for all_reduce, the whole (unreduced / gathered)
# buffer for reduce_scatter and all_gather.


def _check_ring(nbytes: float, n: int, alpha: float, beta: float) -> None:
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n (number of ranks) must be a whole number >= 1, got {n!r}")
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError(f"nbytes, alpha and beta must be >= 0, got {nbytes}, {alpha}, {beta}")


def ring_reduce_scatter_seconds(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring reduce-scatter of an ``nbytes`` buffer over ``n`` ranks: ``(n-1) alpha + (n-1)/n nbytes beta``."""
    _check_ring(nbytes, n, alpha, beta)
    return (n - 1) * alpha + (n - 1) / n * nbytes * beta


def ring_all_gather_seconds(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring all-gather into an ``nbytes`` buffer (each rank brings nbytes / n): same cost as reduce-scatter."""
    _check_ring(nbytes, n, alpha, beta)
    return (n - 1) * alpha + (n - 1) / n * nbytes * beta


def ring_allreduce_seconds(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring all-reduce = reduce-scatter then all-gather: ``2 (n-1) alpha + 2 (n-1)/n nbytes beta``.

    The bandwidth term tends to ``2 nbytes beta`` as n grows (it barely depends on n); the latency term
    grows linearly with n. With one rank there is nothing to send: 0 s.
    """
    return (ring_reduce_scatter_seconds(nbytes, n, alpha, beta)
            + ring_all_gather_seconds(nbytes, n, alpha, beta))


RING_COSTS = {
    "all_reduce": ring_allreduce_seconds,
    "reduce_scatter": ring_reduce_scatter_seconds,
    "all_gather": ring_all_gather_seconds,
}


def collective_seconds(op: str, nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Alpha-beta ring cost of ``op`` ("all_reduce", "reduce_scatter" or "all_gather")."""
    if op not in RING_COSTS:
        raise ValueError(f"no ring model for {op!r}; one of {sorted(RING_COSTS)}")
    return RING_COSTS[op](nbytes, n, alpha, beta)


def _ring_terms(op: str, nbytes: float, n: int) -> tuple[float, float]:
    """(multiplier of alpha, multiplier of beta) of the ring cost of ``op``."""
    steps = 2 * (n - 1) if op == "all_reduce" else (n - 1)
    return float(steps), steps / n * nbytes


def fit_alpha_beta(op: str, nbytes: list, seconds: list, n: int, relative: bool = False) -> tuple[float, float]:
    """Least-squares ``(alpha, beta)`` of the ring model for measured ``seconds`` at message sizes ``nbytes``.

    ``nbytes`` and ``seconds`` are sequences of the same length (at least two different sizes) measured
    with ``n`` >= 2 ranks. ``relative=True`` minimises relative errors (each point weighted by 1/t^2), so
    small messages (latency) count as much as big ones (bandwidth); the default minimises absolute errors,
    dominated by the biggest messages. Negative estimates (noise on tiny messages) are clipped to 0.
    """
    if op not in RING_COSTS:
        raise ValueError(f"no ring model for {op!r}; one of {sorted(RING_COSTS)}")
    if n < 2:
        raise ValueError("fitting needs n >= 2 ranks: with one rank nothing is sent")
    if len(nbytes) != len(seconds) or len(set(nbytes)) < 2:
        raise ValueError("need matching lists with at least two different message sizes")
    rows = [_ring_terms(op, b, n) for b in nbytes]
    if relative:   # divide each equation by its measured time: t/t = 1 = a x/t + b y/t
        rows = [(x / t, y / t) for (x, y), t in zip(rows, seconds)]
        seconds = [1.0] * len(seconds)
    # Normal equations of t = a * x + b * y (two unknowns, no intercept).
    sxx = sum(x * x for x, _ in rows)
    sxy = sum(x * y for x, y in rows)
    syy = sum(y * y for _, y in rows)
    sxt = sum(x * t for (x, _), t in zip(rows, seconds))
    syt = sum(y * t for (_, y), t in zip(rows, seconds))
    det = sxx * syy - sxy * sxy
    alpha = (sxt * syy - syt * sxy) / det
    beta = (syt * sxx - sxt * sxy) / det
    if alpha < 0:   # refit beta alone through the origin
        alpha, beta = 0.0, syt / syy
    if beta < 0:
        alpha, beta = sxt / sxx, 0.0
    return alpha, beta


# --------------------------------------------------------------------------------------------------------
# What each collective moves and leaves behind.

COLLECTIVE_NEEDS = {
    "reduce": "only one root rank needs the sum",
    "all_reduce": "every rank needs the same full sum",
    "all_gather": "every rank needs the concatenation of everybody's different pieces",
    "reduce_scatter": "each rank needs only its own slice of the sum",
    "broadcast": "every rank needs one rank's data",
}


def bytes_sent_per_rank(op: str, nbytes: float, n: int) -> float:
    """Bytes each rank sends over its links in a bandwidth-optimal algorithm (ring, or pipelined tree).

    ``nbytes`` as in :func:`busbw`. This is exactly the quantity that makes busbw comparable with the link
    bandwidth: ``bytes_sent_per_rank / seconds == busbw``. all_reduce: 2 (n-1)/n nbytes; reduce_scatter and
    all_gather: (n-1)/n nbytes; reduce, broadcast, sendrecv: nbytes (a pipelined chain passes every byte on).
    """
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {op!r}; one of {sorted(BUSBW_FACTORS)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    return BUSBW_FACTORS[op](n) * nbytes


def result_bytes_per_rank(op: str, nbytes: float, n: int, rank: int = 0, root: int = 0) -> float:
    """Bytes of result each rank holds afterwards (the memory the output needs on that rank).

    all_reduce, all_gather, broadcast: nbytes on every rank; reduce: nbytes on ``root``, 0 elsewhere;
    reduce_scatter: nbytes / n on every rank.
    """
    if op in ("all_reduce", "all_gather", "broadcast"):
        return float(nbytes)
    if op == "reduce":
        return float(nbytes) if rank == root else 0.0
    if op == "reduce_scatter":
        return nbytes / n
    raise ValueError(f"unknown collective {op!r}")


def collective_table(nbytes: float, n: int) -> list[dict]:
    """One row per collective: what the next step needs, bytes sent per rank, result bytes per rank.

    Rows (dicts with keys op, needs, sent_per_rank, result_on_rank0, result_on_other) for reduce,
    all_reduce, all_gather and reduce_scatter, with ``nbytes`` as in :func:`busbw`.
    """
    rows = []
    for op in ("reduce", "all_reduce", "all_gather", "reduce_scatter"):
        rows.append(dict(op=op, needs=COLLECTIVE_NEEDS[op], sent_per_rank=bytes_sent_per_rank(op, nbytes, n),
                         result_on_rank0=result_bytes_per_rank(op, nbytes, n, rank=0),
                         result_on_other=result_bytes_per_rank(op, nbytes, n, rank=min(1, n - 1))))
    return rows


# --------------------------------------------------------------------------------------------------------
# Step time, speedup, scaling efficiency.


def step_seconds(compute_seconds: float, n: int, comm_seconds: float = 0.0, overhead_seconds: float = 0.0) -> float:
    """Model of one synchronous step on ``n`` ranks: ``compute_seconds / n + comm_seconds + overhead_seconds``.

    ``compute_seconds`` is the compute of the whole problem on one GPU, split evenly (the ideal case; an
    uneven split is paced by the biggest shard, see :func:`straggler_step_seconds`).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return compute_seconds / n + comm_seconds + overhead_seconds


def straggler_step_seconds(shard_costs: list, seconds_per_unit: float, comm_seconds: float = 0.0) -> float:
    """A synchronous step with uneven shards: the biggest shard sets the pace (``max(costs) * s + comm``)."""
    return max(shard_costs) * seconds_per_unit + comm_seconds


def speedup(t1: float, tn: float) -> float:
    """Speed-up ``t1 / tn`` (the seed's example: ``speedup(0.400, 0.250) == 1.6``)."""
    if tn <= 0:
        raise ValueError(f"tn must be positive, got {tn}")
    return t1 / tn


def strong_scaling_efficiency(t1: float, tn: float, n: int) -> float:
    """Strong scaling (same total problem on n ranks): ``t1 / (n * tn)``; 1.0 is perfect."""
    return speedup(t1, tn) / n


def weak_scaling_efficiency(t1: float, tn: float) -> float:
    """Weak scaling (problem grows with n, same work per rank): ``t1 / tn``; 1.0 is perfect."""
    return speedup(t1, tn)


def strong_scaling(compute_seconds: float, ns, nbytes: float, alpha: float, beta: float) -> list[dict]:
    """Model of strong scaling: a fixed job (``compute_seconds`` on one GPU) plus an all-reduce of ``nbytes``.

    Returns one dict per n in ``ns`` with keys n, compute, comm, step, speedup, efficiency (seconds and ratios).
    """
    t1 = step_seconds(compute_seconds, 1)
    rows = []
    for n in ns:
        comm = ring_allreduce_seconds(nbytes, n, alpha, beta)
        t = step_seconds(compute_seconds, n, comm)
        rows.append(dict(n=n, compute=compute_seconds / n, comm=comm, step=t, speedup=speedup(t1, t),
                         efficiency=strong_scaling_efficiency(t1, t, n)))
    return rows


def weak_scaling(compute_per_rank_seconds: float, ns, nbytes: float, alpha: float, beta: float) -> list[dict]:
    """Model of weak scaling: each rank keeps ``compute_per_rank_seconds`` of work, plus an all-reduce.

    Returns one dict per n with keys n, compute, comm, step, efficiency.
    """
    t1 = compute_per_rank_seconds
    rows = []
    for n in ns:
        comm = ring_allreduce_seconds(nbytes, n, alpha, beta)
        t = compute_per_rank_seconds + comm
        rows.append(dict(n=n, compute=compute_per_rank_seconds, comm=comm, step=t,
                         efficiency=weak_scaling_efficiency(t1, t)))
    return rows


def slower_with_one_more(compute_seconds: float, n: int, nbytes: float, alpha: float, beta: float) -> bool:
    """True when going from n to n + 1 ranks makes the modelled strong-scaling step slower.

    The compute saved, ``compute/n - compute/(n+1)``, is smaller than the extra communication: two more ring
    steps (``2 alpha``) and a slightly larger bandwidth term.
    """
    before = step_seconds(compute_seconds, n, ring_allreduce_seconds(nbytes, n, alpha, beta))
    after = step_seconds(compute_seconds, n + 1, ring_allreduce_seconds(nbytes, n + 1, alpha, beta))
    return after > before


# --------------------------------------------------------------------------------------------------------
# Memory per rank by strategy.

PARTS = ("params", "grads", "optimizer", "activations")

# For each strategy: which parts are split across ranks (the rest is replicated: every rank holds all of it).
STRATEGIES = {
    "replicate": (),
    "data_parallel": ("activations",),
    "tensor_parallel": ("params", "grads", "optimizer"),
    "pipeline_parallel": ("params", "grads", "optimizer", "activations"),
    "zero1": ("optimizer", "activations"),
    "zero2": ("optimizer", "grads", "activations"),
    "zero3": ("params", "grads", "optimizer", "activations"),
    "unified_memory": (),
}

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
    "unified_memory": "nothing is split: what exceeds the GPU lives in host memory and migrates on demand "
                      "over PCIe (oversubscription runs, slowly; GPU memories are not merged)",
}


@dataclass(frozen=True)
class RankMemory:
    """Memory one rank needs, by part (same unit as the inputs, e.g. GB)."""

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
    """What :func:`memory_plan` found: per-rank memory, the capacity, what is replicated or sharded."""

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
        """Every rank fits in its own GPU's memory (capacity is per GPU, never pooled)."""
        return all(self.rank_fits)

    @property
    def oversubscribed(self) -> list:
        """Per rank, how much exceeds the capacity (0 where it fits): what unified memory would spill."""
        return [max(0.0, t - self.capacity) for t in self.totals]

    @property
    def imbalance(self) -> float:
        """max / mean of the per-rank totals (1.0 = perfectly balanced)."""
        mean = sum(self.totals) / len(self.totals)
        return max(self.totals) / mean if mean > 0 else 1.0

    def summary(self) -> str:
        per = ", ".join(f"{t:g}" for t in self.totals)
        verdict = "fits" if self.fits else "does NOT fit"
        rep = ", ".join(self.replicated) or "nothing"
        return (f"{self.strategy} on {len(self.ranks)} rank(s): per rank [{per}] vs capacity "
                f"{self.capacity:g} -> {verdict}; replicated: {rep}")


def memory_plan(strategy: str, n: int, capacity: float, params: float = 0.0, grads: float = 0.0,
                optimizer: float = 0.0, activations: float = 0.0, weights=None) -> MemoryPlan:
    """Memory each of ``n`` ranks needs under ``strategy``, against a per-GPU ``capacity``.

    ``params``, ``grads``, ``optimizer``, ``activations``: sizes of the whole job (one unit for all, e.g.
    GB); ``strategy``: a key of :data:`STRATEGIES`. Sharded parts are split in proportion to ``weights``
    (one number per rank; default equal shares, e.g. ``(14, 10)`` for an uneven split of two ranks);
    replicated parts are held whole by every rank. Returns a :class:`MemoryPlan`.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {sorted(STRATEGIES)}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be a whole number >= 1, got {n!r}")
    if weights is None:
        weights = [1.0] * n
    if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be {n} non-negative numbers with a positive sum, got {weights!r}")
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"sizes must be >= 0, got {sizes}")
    sharded = STRATEGIES[strategy]
    total_w = float(sum(weights))
    ranks = []
    for r in range(n):
        share = weights[r] / total_w
        ranks.append(RankMemory(r, **{p: sizes[p] * share if p in sharded else sizes[p] for p in PARTS}))
    replicated = tuple(p for p in PARTS if p not in sharded and sizes[p] > 0)
    return MemoryPlan(strategy, capacity, tuple(ranks), replicated,
                      tuple(p for p in PARTS if p in sharded and sizes[p] > 0), STRATEGY_NOTES[strategy])


# --------------------------------------------------------------------------------------------------------
# Sharding: who owns which item.


def shard_ranges(n_items: int, world_size: int) -> list[range]:
    """Contiguous, equal-count ranges of item indices, one per rank (the first ``n_items % world_size``
    ranks get one more). Reproducible, no overlap, covers 0..n_items-1."""
    if world_size < 1 or n_items < 0:
        raise ValueError(f"need world_size >= 1 and n_items >= 0, got {world_size}, {n_items}")
    base, extra = divmod(n_items, world_size)
    out, start = [], 0
    for r in range(world_size):
        stop = start + base + (1 if r < extra else 0)
        out.append(range(start, stop))
        start = stop
    return out


def balanced_shards(costs, world_size: int, method: str = "lpt") -> list[list[int]]:
    """Assign item indices to ``world_size`` ranks so that each rank's summed cost is close to equal.

    ``costs``: one non-negative number per item (e.g. its size in GB or its compute time).
    ``method="lpt"``: greedy longest-processing-time first (biggest item to the least-loaded rank; ties
    broken by item index and rank number, so the result is reproducible); items of a rank come back sorted.
    ``method="contiguous"``: consecutive runs of items, cut where the running total crosses
    ``k * total / world_size`` (keeps order, e.g. for sequences).
    Both guarantee ``max load <= total / world_size + max(costs)``. Returns one list of indices per rank;
    every index appears exactly once.
    """
    costs = [float(c) for c in costs]
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be >= 0")
    if method == "lpt":
        loads = [0.0] * world_size
        shards = [[] for _ in range(world_size)]
        for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
            r = min(range(world_size), key=lambda r: (loads[r], r))
            shards[r].append(i)
            loads[r] += costs[i]
        return [sorted(s) for s in shards]
    if method == "contiguous":
        total = sum(costs)
        if total == 0:   # nothing to balance: split by count
            return [list(r) for r in shard_ranges(len(costs), world_size)]
        shards = [[] for _ in range(world_size)]
        running, r = 0.0, 0
        for i, c in enumerate(costs):
            # Move to the next rank once the running total has reached this rank's target boundary.
            while r < world_size - 1 and total > 0 and running >= (r + 1) * total / world_size:
                r += 1
            shards[r].append(i)
            running += c
        return shards
    raise ValueError(f"method must be 'lpt' or 'contiguous', got {method!r}")


def shard_loads(costs, shards) -> list[float]:
    """Summed cost of each rank's shard (``shards`` as returned by :func:`balanced_shards`)."""
    return [sum(float(costs[i]) for i in s) for s in shards]


def shard(items, rank: int, world_size: int, costs=None, method: str = "lpt") -> list:
    """The items owned by ``rank``: the seed's ``local = shard(dataset, rank, world_size)``.

    Without ``costs``: a contiguous equal-count slice (:func:`shard_ranges`). With ``costs`` (one per item):
    balanced by cost (:func:`balanced_shards`). Every rank calling it with the same inputs gets disjoint
    pieces that together cover ``items`` exactly once.
    """
    items = list(items)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    if costs is None:
        return [items[i] for i in shard_ranges(len(items), world_size)[rank]]
    if len(costs) != len(items):
        raise ValueError(f"need one cost per item: {len(costs)} costs for {len(items)} items")
    return [items[i] for i in balanced_shards(costs, world_size, method)[rank]]
