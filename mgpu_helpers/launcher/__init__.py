"""The rank launcher: ``run_ranks`` runs a function on N ranks from a notebook cell (modules: ``README.md``)."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(
    __name__,
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
