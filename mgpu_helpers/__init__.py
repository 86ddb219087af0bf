"""mgpu_helpers: the helper library of the mgpu-course notebooks: ``import mgpu_helpers as mh; env = mh.setup()``.

Everything else is reached as ``mh.something``, each module imported on first use: not numba, because Numba's CUDA
simulator must be switched on (by :func:`setup`) before numba is first imported, nor torch, which a kernel should
not pay for until it needs it. ``README.md`` maps the layers."""

from mgpu_helpers.lazy import attach

_SUBMODULES = "bench checks course hardware launcher lessons measure models own_code report runs tools tracking widgets"

__getattr__, __dir__, __all__ = attach(
    __name__,
    submodules=_SUBMODULES.split(),
    attributes={
        "CourseEnv": "course",
        "setup": "course",
        "LaunchError": "launcher",
        "RankError": "launcher",
        "RankResults": "launcher",
        "RankTimeout": "launcher",
        "rank_device": "launcher",
        "run_ranks": "launcher",
        "shutdown_server": "launcher",
        "torchrun_main": "launcher",
        "trace": "launcher",
        "projection_mode": "widgets.projection",
        "mine": "own_code",
        "progress": "tracking",
    },
)
