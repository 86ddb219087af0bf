"""Straggler runs: launch the traced straggler step on real ranks, and read waits and margins from the results.

:func:`run_traced` starts :func:`mgpu_helpers.measure.workloads.straggler_step` on one rank per shard and
returns the launcher's ``RankResults`` (``.values``: one dict per rank; ``.spans``: the traced spans per rank).
The functions below reduce those results to the numbers notebook 08 and ex08 compare with a model.

Two kinds of compute, chosen by ``seconds_per_unit``:

- **deterministic cost** (``seconds_per_unit`` given): each unit of shard is a fixed sleep, so compute time is
  proportional to the shard whatever else runs on the machine. The measured waits then differ from the model
  ``(max shard - own shard) * seconds_per_unit`` only by how late the ranks woke up and how far apart they left
  the starting barrier; :func:`model_margin` measures exactly that bound in the same run, so an ordering or a
  ratio can be asserted without a quiet machine.
- **real matmuls** (``seconds_per_unit=None``): the time of real work, which depends on the device and the
  load. In CPU mode every rank is pinned to one core when there are enough
  (:func:`mgpu_helpers.launcher.ranks.cpu_placement`); when ranks outnumber cores, rank r shares core
  ``r % cores`` with others, and a rank that finishes frees the core for the rest, so compute time is not
  strictly proportional to the shard. Two cores of one machine can also differ by 1.5x over time (virtual
  machines especially): system noise makes stragglers too. :func:`noise_floor` (the worst wait of a balanced
  run) is the level an uneven run's waits must clear before they say anything about the shards.
"""

import itertools
import statistics


def run_traced(
    shard_units,
    steps: int = 5,
    timeout: float = 60.0,
    seconds_per_unit=None,
    grad_numel=None,
    timestamp_barrier: bool = True,
):
    """Run the straggler step on ``len(shard_units)`` real ranks for ``steps`` steps; returns RankResults.

    ``seconds_per_unit``: None for real matmuls, or seconds per unit of shard (a number, or one per rank) for
    the deterministic-cost mode. ``timestamp_barrier=False``: no wait span; the early ranks wait inside the
    all-reduce (see :func:`run_waiting_inside`).
    """
    from mgpu_helpers.launcher import launch
    from mgpu_helpers.measure import workloads

    shard_units = tuple(shard_units)
    if not shard_units or any(u < 0 for u in shard_units):
        raise ValueError(f"give one non-negative shard size per rank, like (12, 6, 4, 2); got {shard_units!r}")
    args = (shard_units, grad_numel, steps, None, None, seconds_per_unit, timestamp_barrier)
    return launch.run_ranks(
        workloads.straggler_step, len(shard_units), args=args, timeout=timeout, stream=False, quiet=True
    )


def wait_by_rank(spans_per_rank) -> list[float]:
    """Seconds each rank spent waiting at collectives (its "wait" spans)."""
    return [sum((s.seconds for s in spans if s.kind == "wait"), 0.0) for spans in spans_per_rank]


def median_waits(values) -> list[float]:
    """Per rank, the median over steps of its wait at the collective (seconds), from ``RankResults.values``.

    A median, not a sum: on a busy machine another process can stall one rank for one step, which moves
    a sum over steps but not the median of several steps.
    """
    return [statistics.median(v["wait_s"]) for v in values]


def median_worst_wait(values) -> float:
    """The median over steps of that step's largest wait (any rank): how long the earliest rank idles."""
    steps = len(values[0]["wait_s"])
    return statistics.median(max(v["wait_s"][k] for v in values) for k in range(steps))


def median_step_seconds(values) -> float:
    """The median over steps of the step time as the slowest rank saw it: compute + wait + all-reduce."""
    steps = len(values[0]["wait_s"])
    return statistics.median(
        max(v["compute_s"][k] + v["wait_s"][k] + v["comm_s"][k] for v in values) for k in range(steps)
    )


def noise_floor(balanced_values) -> float:
    """The worst wait of a run with equal shards (median over steps): what noise alone makes a rank wait."""
    return median_worst_wait(balanced_values)


def model_margin(values, seconds_per_unit) -> float:
    """How far, at most, a deterministic-cost run's waits can be from the model, measured in the same run (s).

    Per step, rank r's wait minus the model's ``(max shard - own shard) * s`` is bounded by the spread of the
    ranks' start times (``start_skew_s``) plus the spread of their late wake-ups (measured compute minus
    ``shard * s``). Returns the largest such bound over the run's steps (so it also bounds the medians).
    """
    late = _late_wakeups(values, seconds_per_unit)
    return max([0.0] + [values[0]["start_skew_s"][k] + max(lk) - min(lk) for k, lk in enumerate(late)])


def step_margin(values, seconds_per_unit) -> float:
    """How much longer than ``max shard * s + all-reduce`` a deterministic-cost step can measure (s).

    The slowest rank's step also carries the spread of start times and the latest wake-up of any rank (a
    late wake-up that every rank shares lengthens the step without changing any wait). Largest over steps.
    """
    late = _late_wakeups(values, seconds_per_unit)
    return max(values[0]["start_skew_s"][k] + max(lk) for k, lk in enumerate(late))


def _late_wakeups(values, seconds_per_unit) -> list[list[float]]:
    """``[step][rank]``: how much longer than ``shard * s`` each rank's compute took (a late wake-up)."""
    if seconds_per_unit is None:
        raise ValueError("model_margin needs the seconds_per_unit of a deterministic-cost run")
    one = isinstance(seconds_per_unit, (int, float))
    per_unit = [float(seconds_per_unit)] * len(values) if one else [float(s) for s in seconds_per_unit]
    return [
        [v["compute_s"][k] - float(v["shard"]) * s for v, s in zip(values, per_unit)]
        for k in range(len(values[0]["wait_s"]))
    ]


def contradicted_orderings(waits, predicted, margin: float) -> list[tuple[int, int]]:
    """Pairs of ranks (a, b) whose predicted waits differ by more than twice ``margin`` but whose measured
    waits are ordered the other way round: the orderings a run contradicts (empty when it agrees)."""
    pairs = itertools.product(range(len(waits)), repeat=2)
    return [(a, b) for a, b in pairs if predicted[a] - predicted[b] > 2 * margin and not waits[a] > waits[b]]


# -- waiting inside the collective (no timestamp barrier) ------------------------------------------------------


def run_waiting_inside(shard_units, steps: int = 5, seconds_per_unit=0.020, grad_numel=None, timeout: float = 60.0):
    """The deterministic-cost straggler step with no timestamp barrier: each rank enters the all-reduce as soon
    as its compute is done, so the early ranks wait *inside* it. Returns RankResults: ``.spans`` hold only
    compute and communicate spans (as a profiler trace would), ``.values[r]["comm_s"]`` the time inside the
    collective per step and ``.values[r]["wait_s"]`` the part of it that was waiting (known afterwards from the
    all-gathered arrival times). ``seconds_per_unit`` None runs real matmuls instead (not deterministic)."""
    return run_traced(shard_units, steps, timeout, seconds_per_unit, grad_numel, timestamp_barrier=False)


def median_collective(values) -> list[float]:
    """Per rank, the median over steps of the time inside the all-reduce (seconds)."""
    return [statistics.median(v["comm_s"]) for v in values]


def straggler_by_collective(collective_s) -> int:
    """The straggler from the time each rank spent inside the collective (``collective_s[r]``: a number, or
    a list of per-step times whose median is used): the rank whose collective is the SHORTEST. Every other
    rank arrived earlier and waited for it inside the collective; the straggler arrived last and only paid
    for the collective itself."""
    per_rank = [statistics.median(t) if isinstance(t, (list, tuple)) else float(t) for t in collective_s]
    if not per_rank:
        raise ValueError("give one collective time (or list of per-step times) per rank")
    return min(range(len(per_rank)), key=lambda r: per_rank[r])


def collective_margin(values, seconds_per_unit) -> float:
    """This run's bound (s) on how far a rank's median time inside the collective can be from the model
    ``(max shard - own shard) * s + (the all-reduce itself)``: :func:`model_margin` (start skew and late
    wake-ups) plus the largest time the all-reduce itself took on any rank and step (``comm_s - wait_s``)."""
    itself = max(c - w for v in values for c, w in zip(v["comm_s"], v["wait_s"]))
    return model_margin(values, seconds_per_unit) + max(0.0, itself)
