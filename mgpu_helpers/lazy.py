"""Lazy attributes for the course's packages: ``mh.widgets.sharding`` imports that module on first use.

Importing :mod:`mgpu_helpers` must stay cheap and must not import numba: Numba's CUDA simulator is switched on
by ``mh.setup()`` through an environment variable that numba reads once, when it is first imported. The loading
itself is scientific-python's ``lazy_loader.attach``; this module only finds a package's modules (so a new module
needs no registering) and lets a package name its public attributes by the module that defines them.
"""

import importlib.util
import pkgutil

import lazy_loader


def attach(package: str, submodules=None, attributes: dict | None = None):
    """Return ``(__getattr__, __dir__, __all__)`` for ``package``, as ``lazy_loader.attach`` does.

    ``submodules``: names of modules or subpackages reached as attributes (default: every module in the
    package's folder, found without importing any); ``attributes``: public name -> the submodule (relative
    to ``package``) that defines it.
    """
    if submodules is None:
        found = pkgutil.iter_modules(importlib.util.find_spec(package).submodule_search_locations)
        submodules = [m.name for m in found if not m.name.startswith("_")]
    by_module: dict[str, list[str]] = {}
    for name, module in (attributes or {}).items():
        by_module.setdefault(module, []).append(name)
    return lazy_loader.attach(package, submodules=submodules, submod_attrs=by_module)
