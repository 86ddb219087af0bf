"""Lazy attributes for the course's packages: ``mh.widgets.sharding`` imports that module on first use.

Importing :mod:`mgpu_helpers` must stay cheap and must not import numba: Numba's CUDA simulator is switched on
by ``mh.setup()`` through an environment variable that numba reads once, when it is first imported. So every
package of the library names its submodules and public names here and loads each one only when it is used.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil


def attach(package: str, submodules=None, attributes: dict | None = None):
    """Return ``(__getattr__, __dir__, __all__)`` for ``package``.

    ``submodules``: names of modules or subpackages reached as attributes (default: every module in the
    package's folder, found without importing any); ``attributes``: public name -> the submodule (relative
    to ``package``) that defines it.
    """
    if submodules is None:
        spec = importlib.util.find_spec(package)
        submodules = [m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)
                      if not m.name.startswith("_")]
    submodules = set(submodules)
    attributes = dict(attributes or {})
    names = sorted(submodules | set(attributes))

    def __getattr__(name: str):
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name in attributes:
            module = importlib.import_module(f"{package}.{attributes[name]}")
            return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return names

    return __getattr__, __dir__, names
