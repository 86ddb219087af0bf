"""The rank launcher: ``run_ranks`` runs a function on N ranks from a notebook cell.

Layout: :mod:`.launch` (``run_ranks`` and the client of the rank server), :mod:`.server` (the CUDA-clean rank
server that forks ranks), :mod:`.forkserver` (one process per user that forks each kernel's rank server, torch
already imported), :mod:`.rank_process` (the life of one rank process), :mod:`.job` (one launch's pipes and
state, and how its ranks are ended), :mod:`.supervise` (noticing and explaining failures), :mod:`.flight`
(torch's flight recorder, read on a hang), :mod:`.interrupts` (holding SIGINT back while state changes),
:mod:`.messages` and :mod:`.wire` (the records and frames between the processes), :mod:`.errors` and
:mod:`.results` (the public types), :mod:`.ranks` (helpers called inside a rank: its device, process-group
set-up, torchrun), :mod:`.trace` (the spans each rank records and sends back).
"""

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
