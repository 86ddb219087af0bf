"""The course's widgets. Each module has a pure drawing function (matplotlib, works in static HTML and in
tests) and a thin ipywidgets wrapper around it. Import the module you need; nothing here imports ipywidgets
until a widget is built."""
