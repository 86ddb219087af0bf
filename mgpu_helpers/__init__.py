"""mgpu_helpers: the helper library of the mgpu-course notebooks: ``import mgpu_helpers as mh; env = mh.setup()``.
Everything else is reached as ``mh.something``, each module imported on first use (``README.md`` says why)."""

from mgpu_helpers.lazy import attach

_SUBMODULES = "bench checks course hardware launcher lessons measure models own_code report runs tools tracking widgets"
# The names reached as ``mh.<name>``, by the module that defines them.
_PUBLIC = {
    "course": "CourseEnv setup",
    "launcher": "LaunchError RankError RankResults RankTimeout rank_device run_ranks shutdown_server torchrun_main trace",
    "widgets.projection": "projection_mode",
    "own_code": "mine",
    "tracking": "progress",
}
_NAMES = {name: module for module, names in _PUBLIC.items() for name in names.split()}
__getattr__, __dir__, __all__ = attach(__name__, submodules=_SUBMODULES.split(), attributes=_NAMES)
