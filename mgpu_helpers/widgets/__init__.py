"""The course's widgets: pure drawing functions (matplotlib, for static HTML and tests) with thin ipywidgets
wrappers, which import ipywidgets only when a widget is built. A drawing returns its pyplot Figure, which
Jupyter shows at the end of the cell; ``style.show`` displays and closes it."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
