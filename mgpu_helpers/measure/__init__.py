"""What runs and times (mgpu_helpers/README.md lists the modules); how the figures are then written, read and
compared is ``mh.report``, per-rank spans are ``mh.trace``, the lessons' own code run on ranks ``mh.runs``."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
