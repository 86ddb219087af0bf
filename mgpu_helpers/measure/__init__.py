"""What runs and times: timed sweeps of collectives, workloads of known cost, CUDA-event timing, peer copies,
stragglers, per-collective spans and profiles, the diagnostics' probes and the data-parallel reference.

How the figures are then written, read and compared is ``mh.report``; per-rank spans are the launcher's
(``mh.trace``); the lessons' own code run on ranks is in ``mh.runs``."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
