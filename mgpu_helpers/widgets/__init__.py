"""The course's widgets. Each module has a pure drawing function (matplotlib, works in static HTML and in
tests) and a thin ipywidgets wrapper around it. Import the module you need; nothing here imports ipywidgets
until a widget is built.

A drawing function returns its Figure made with pyplot, so Jupyter's inline backend shows it at the end of the
cell; close it with ``plt.close(fig)`` when drawing many (``style.show`` displays and closes it)."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)
