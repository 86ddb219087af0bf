"""Course tooling for maintainers and teachers: notebook cleaning, exercise generation, static export, doctor."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
