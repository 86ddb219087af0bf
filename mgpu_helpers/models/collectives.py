"""The seven collectives of the course by name, and what each must give every rank (NumPy, pure). The root is
rank 0; scatter and reduce_scatter give rank r piece r; gather and all_gather concatenate in rank order."""

import numpy as np

COLLECTIVES = ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter", "gather", "scatter")
#: The ``torch.distributed`` functions that carry out each collective: the one-tensor form first (all-gather and
#: reduce-scatter of whole tensors), then the form that takes a list of tensors where torch has both.
TORCH_FUNCTIONS = {name: (name,) for name in COLLECTIVES} | {
    "all_gather": ("all_gather_into_tensor", "all_gather"),
    "reduce_scatter": ("reduce_scatter_tensor", "reduce_scatter"),
}
ROOT = 0
#: Collectives whose result depends on the reduce op.
REDUCING = ("reduce", "all_reduce", "reduce_scatter")
# Each reduce op by the name notebook 05 gives it, applied over the ranks (axis 0 of ``inputs[rank][i]``).
_REDUCERS = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min, "prod": np.prod}
#: The reduce ops by name (notebook 05's ``REDUCE_OPS`` is this tuple).
REDUCE_OPS = tuple(_REDUCERS)
PATTERNS = ("rank", "rank+1", "one-hot", "powers of two", "random")


def default_length(name: str, world_size: int) -> int:
    """Elements per rank: 2 per rank for scatter/reduce_scatter (they split the input), else 4."""
    return 2 * world_size if name in ("scatter", "reduce_scatter") else 4


def make_inputs(pattern: str, world_size: int, length: int = 4, seed: int = 0) -> list[list[float]]:
    """``inputs[rank][i]`` of a pattern: "rank", "rank+1", "one-hot" (element ``i`` is 1 where ``i % world_size ==
    rank``), "powers of two" (2**rank: a sum shows which ranks it holds), "random" (small whole numbers)."""
    if world_size < 1 or length < 1:
        raise ValueError(f"world_size and length must be >= 1, got {world_size}, {length}")
    same = {"rank": lambda r: r, "rank+1": lambda r: r + 1, "powers of two": lambda r: 2**r}  # per rank
    if pattern in same:
        return [[float(same[pattern](r))] * length for r in range(world_size)]
    if pattern == "one-hot":
        return [[1.0 if i % world_size == r else 0.0 for i in range(length)] for r in range(world_size)]
    if pattern == "random":
        return np.random.default_rng(seed).integers(0, 10, size=(world_size, length)).astype(float).tolist()
    raise ValueError(f"pattern must be one of {PATTERNS}, not {pattern!r}")


def expected_outputs(name: str, inputs, op: str = "sum") -> list:
    """What collective ``name`` gives each rank (list of floats, or None where a rank gets nothing)."""
    a = np.asarray(inputs, dtype=float)
    n, length = a.shape
    if name in REDUCING and op not in _REDUCERS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, not {op!r}")
    reduced = _REDUCERS[op](a, axis=0) if name in REDUCING else None
    # What a rank that receives a whole result gets; reduce and gather give it to the root alone.
    gathered = a.reshape(-1)
    whole = dict(broadcast=a[ROOT], reduce=reduced, all_reduce=reduced, gather=gathered, all_gather=gathered)
    if name in whole:
        return [None if name in ("reduce", "gather") and r != ROOT else whole[name].tolist() for r in range(n)]
    if name in ("scatter", "reduce_scatter"):
        if length % n:
            raise ValueError(f"{name} needs a length divisible by world_size={n}, got {length}")
        return [p.tolist() for p in np.split(a[ROOT] if name == "scatter" else reduced, n)]
    raise ValueError(f"unknown collective {name!r}; one of {COLLECTIVES}")


def outputs_match(got, want, rtol: float = 1e-6) -> bool:
    """True when every rank's output equals the expected one (None where None is expected)."""

    def same(g, w):
        if g is None or w is None:
            return g is w
        return len(g) == len(w) and np.allclose(g, w, rtol=rtol, atol=1e-9)

    return len(got) == len(want) and all(map(same, got, want))
