"""The rank launcher: ``run_ranks`` runs a function on N ranks from a notebook cell.

Layout: :mod:`.launch` (``run_ranks`` and the client of the rank server), :mod:`.server` (the CUDA-clean rank
server that forks ranks), :mod:`.rank` (the life of one rank process), :mod:`.supervise` (reading the ranks'
pipes and explaining failures), :mod:`.wire` (the frames between them), :mod:`.errors` and :mod:`.results`
(the public types), :mod:`.ranks` (helpers called inside a rank: its device, process-group set-up, torchrun).
"""
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(
    __name__,
    submodules=["errors", "launch", "rank", "ranks", "results", "server", "supervise", "wire"],
    attributes={
        "LaunchError": "errors",
        "RankError": "errors",
        "RankTimeout": "errors",
        "RankResults": "results",
        "prewarm": "launch",
        "run_ranks": "launch",
        "shutdown_server": "launch",
        "cpu_placement": "ranks",
        "init_process_group": "ranks",
        "rank_device": "ranks",
        "torchrun_main": "ranks",
    },
)
