"""Straggler runs: the traced straggler step on real ranks, reduced to the waits and margins 08 and ex08 compare.
Two kinds of compute, chosen by ``seconds_per_unit``:

- **deterministic cost** (a number, or one per rank): each unit of shard is a fixed sleep, so the measured waits
  differ from the model ``(max shard - own shard) * seconds_per_unit`` only by late wake-ups and the start skew;
  :func:`model_margin` measures that bound in the same run, so an ordering or a ratio can be asserted without a
  quiet machine.
- **real matmuls** (None): time depends on device and load. When CPU ranks outnumber cores they share them, and
  two cores can differ by 1.5x over time, so noise makes stragglers too: an uneven run's waits must clear
  :func:`noise_floor` (the worst wait of a balanced run) before they say anything about the shards."""

import itertools
import statistics

from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.measure import workloads


def run_traced(
    shard_units, steps: int = 5, timeout: float = 60.0, seconds_per_unit=None, grad_numel=None, timestamp_barrier=True
):
    """RankResults of the straggler step on real ranks (``timestamp_barrier=False``: no wait span)."""
    shard_units = tuple(shard_units)
    if not shard_units or any(u < 0 for u in shard_units):
        raise ValueError(f"give one non-negative shard size per rank, like (12, 6, 4, 2); got {shard_units!r}")
    args = (shard_units, grad_numel, steps, None, None, seconds_per_unit, timestamp_barrier)
    return run_ranks(workloads.straggler_step, len(shard_units), args=args, timeout=timeout, stream=False, quiet=True)


def wait_by_rank(spans_per_rank) -> list[float]:
    """Seconds each rank spent in its "wait" spans."""
    return [sum((s.seconds for s in spans if s.kind == "wait"), 0.0) for spans in spans_per_rank]


def median_waits(values) -> list[float]:
    """Per rank, the median wait over steps: a stall of one step on a busy machine moves a sum, not the median."""
    return [statistics.median(v["wait_s"]) for v in values]


def median_worst_wait(values) -> float:
    """The median over steps of that step's largest wait (any rank): how long the earliest rank idles."""
    steps = len(values[0]["wait_s"])
    return statistics.median(max(v["wait_s"][k] for v in values) for k in range(steps))


def median_step_seconds(values) -> float:
    """The median over steps of the slowest rank's compute + wait + all-reduce."""
    slowest = lambda k: max(v["compute_s"][k] + v["wait_s"][k] + v["comm_s"][k] for v in values)
    return statistics.median(slowest(k) for k in range(len(values[0]["wait_s"])))


def noise_floor(balanced_values) -> float:
    """The worst wait of a run with equal shards (median over steps): what noise alone makes a rank wait."""
    return median_worst_wait(balanced_values)


def model_margin(values, seconds_per_unit) -> float:
    """The most a deterministic-cost run's waits can differ from the model, measured in the same run (s):
    per step, the start skew plus the spread of the ranks' late wake-ups; the largest over steps."""
    late = _late_wakeups(values, seconds_per_unit)
    return max([0.0] + [values[0]["start_skew_s"][k] + max(lk) - min(lk) for k, lk in enumerate(late)])


def step_margin(values, seconds_per_unit) -> float:
    """How much longer than ``max shard * s + all-reduce`` a deterministic-cost step can measure (s): the start
    skew plus the latest wake-up (one every rank shares lengthens the step without changing any wait)."""
    late = _late_wakeups(values, seconds_per_unit)
    return max(values[0]["start_skew_s"][k] + max(lk) for k, lk in enumerate(late))


def _late_wakeups(values, seconds_per_unit) -> list[list[float]]:
    """``[step][rank]``: how much longer than ``shard * s`` each rank's compute took."""
    if seconds_per_unit is None:
        raise ValueError("model_margin needs the seconds_per_unit of a deterministic-cost run")
    one = isinstance(seconds_per_unit, (int, float))
    per_unit = [float(seconds_per_unit)] * len(values) if one else [float(s) for s in seconds_per_unit]
    steps = range(len(values[0]["wait_s"]))
    return [[v["compute_s"][k] - float(v["shard"]) * s for v, s in zip(values, per_unit)] for k in steps]


def contradicted_orderings(waits, predicted, margin: float) -> list[tuple[int, int]]:
    """Pairs (a, b) predicted apart by over twice ``margin`` whose measured waits are the other way round."""
    pairs = itertools.product(range(len(waits)), repeat=2)
    return [(a, b) for a, b in pairs if predicted[a] - predicted[b] > 2 * margin and not waits[a] > waits[b]]


def run_waiting_inside(shard_units, steps: int = 5, seconds_per_unit=0.020, grad_numel=None, timeout: float = 60.0):
    """The straggler step with no timestamp barrier: the early ranks wait *inside* the all-reduce, so ``.spans`` hold
    only compute and communicate spans (as a profiler trace would); ``values[r]["wait_s"]``: the wait in ``comm_s``."""
    return run_traced(shard_units, steps, timeout, seconds_per_unit, grad_numel, timestamp_barrier=False)


def median_collective(values) -> list[float]:
    """Per rank, the median over steps of the time inside the all-reduce (seconds)."""
    return [statistics.median(v["comm_s"]) for v in values]


def straggler_by_collective(collective_s) -> int:
    """The rank whose time inside the collective (a number, or per-step times) is the SHORTEST: every other rank
    arrived earlier and waited for it there; the straggler only paid for the collective itself."""
    per_rank = [statistics.median(t) if isinstance(t, (list, tuple)) else float(t) for t in collective_s]
    if not per_rank:
        raise ValueError("give one collective time (or list of per-step times) per rank")
    return min(range(len(per_rank)), key=lambda r: per_rank[r])


def collective_margin(values, seconds_per_unit) -> float:
    """This run's bound (s) on a rank's median time inside the collective against the model
    ``(max shard - own shard) * s + the all-reduce``: :func:`model_margin` plus the longest all-reduce itself."""
    itself = max(c - w for v in values for c, w in zip(v["comm_s"], v["wait_s"]))
    return model_margin(values, seconds_per_unit) + max(0.0, itself)
