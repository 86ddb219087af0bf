"""How measured figures are read, written and compared; nothing here launches ranks or times anything."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
