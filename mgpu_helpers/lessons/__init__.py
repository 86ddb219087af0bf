"""The lessons' own code, generated from the notebooks' ``#| export`` cells (``python -m
mgpu_helpers.tools.nbexport``) and used again by later notebooks, the exercises' checkers, benchmarks and tests.

Each module here names its notebook in its first line; edit the notebook, never the module. The list of
modules is read from this folder, so a notebook that starts exporting needs no edit here.
"""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
