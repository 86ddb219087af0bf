"""How measured figures are read, written and compared: byte sizes and units, text tables, progress bars, the
recorded nccl-tests tables, and the lab report. Nothing here launches ranks or times anything (``mh.measure``)."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
