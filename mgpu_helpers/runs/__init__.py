"""The lessons' own code run on real ranks, for a widget or a count."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
