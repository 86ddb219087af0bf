"""What every rank holds after each step of a ring all-reduce (each chunk as the set of ranks it sums): at
reduce-scatter step ``s`` rank ``r`` sends on chunk ``(r - s - 1) % n``, at all-gather step ``s`` ``(r - s) % n``."""

from dataclasses import dataclass

from mgpu_helpers.models.bandwidth import check_world_size


@dataclass(frozen=True)
class Frame:
    """``holds[rank][chunk]``: the ranks that chunk sums; ``received[rank]``: the chunk just received (None at
    the input); ``sent[rank]``: what it has sent so far, as a fraction of the whole buffer S."""

    phase: str  # "input", "reduce_scatter" or "all_gather"
    step: int  # 0-based within the phase (-1 for the input)
    holds: tuple
    received: tuple
    sent: tuple


@dataclass(frozen=True)
class RingSteps:
    """The input, n - 1 reduce-scatter and n - 1 all-gather frames; ``rs_done``: where the first half ends."""

    world_size: int
    frames: tuple

    @property
    def rs_done(self) -> int:
        return self.world_size - 1


def ring_all_reduce_steps(world_size: int) -> RingSteps:
    """Every step of a ring all-reduce over ``world_size`` ranks, one chunk per rank."""
    check_world_size(world_size)
    n = int(world_size)
    holds = [[frozenset([r]) for _ in range(n)] for r in range(n)]
    frames = [Frame("input", -1, tuple(tuple(h) for h in holds), (None,) * n, (0.0,) * n)]
    sent = 0.0
    for phase in ("reduce_scatter", "all_gather"):
        for s in range(n - 1):
            prev = [list(h) for h in holds]
            got = []
            for r in range(n):
                left = (r - 1) % n
                if phase == "reduce_scatter":
                    c = (r - s - 2) % n  # the chunk rank r - 1 sent: (r - 1 - s - 1) % n
                    holds[r][c] = prev[r][c] | prev[left][c]
                else:
                    c = (r - s - 1) % n  # the chunk rank r - 1 passed on: (r - 1 - s) % n
                    holds[r][c] = prev[left][c]
                got.append(c)
            sent += 1.0 / n
            frames.append(Frame(phase, s, tuple(tuple(h) for h in holds), tuple(got), (sent,) * n))
    return RingSteps(n, tuple(frames))
