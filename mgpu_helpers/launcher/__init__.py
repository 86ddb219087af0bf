"""The rank launcher: ``run_ranks`` runs a function on N ranks from a notebook cell (modules: ``README.md``)."""

from mgpu_helpers.lazy import attach

# The public names of each module, reached as ``mh.launcher.<name>`` (the modules themselves too).
_PUBLIC = {
    "errors": "LaunchError RankError RankTimeout",
    "results": "RankResults",
    "launch": "prewarm run_ranks shutdown_server",
    "ranks": "cpu_placement init_process_group rank_device torchrun_main",
}
_NAMES = {name: module for module, names in _PUBLIC.items() for name in names.split()}
__getattr__, __dir__, __all__ = attach(__name__, attributes=_NAMES)
