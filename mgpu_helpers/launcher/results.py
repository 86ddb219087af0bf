from dataclasses import dataclass, field


@dataclass
class RankResults:
    """What a launch brought back, everything indexed by rank. ``values``: what ``fn`` returned on each rank (tensors
    moved to the CPU); ``seconds``: wall time of ``fn`` on each rank; ``init_seconds``: time to join the process group;
    ``outputs``: each rank's output lines; ``spans``: each rank's :mod:`~mgpu_helpers.launcher.trace` spans; ``backend``
    and ``reason``: which backend ran and why; ``launch_seconds``: the whole launch as seen from the cell."""

    world_size: int
    backend: str
    reason: str
    values: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    init_seconds: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    spans: list = field(default_factory=list)
    launch_seconds: float = 0.0

    def __repr__(self) -> str:
        return f"RankResults(world_size={self.world_size}, backend={self.backend!r}, values={self.values!r})"
