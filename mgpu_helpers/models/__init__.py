"""Pure models (no I/O, no torch): bandwidth, collective costs, scaling, memory per rank, sharding, topology.

The formulas a notebook teaches live in that notebook and its generated module (``mh.lessons.cost_model``,
``mh.lessons.sharding_rules``); these modules use them and hold what no lesson is about.
"""
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, submodules=["bandwidth", "costs", "memory", "scaling", "sharding",
                                                             "topology"])
