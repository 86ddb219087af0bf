"""Lazy attributes for the course's packages: ``mh.widgets.sharding`` imports that module on first use (the README
says why), through ``lazy_loader.attach``; this finds a package's modules, so that a new one needs no registering."""

import importlib.util
import pkgutil

import lazy_loader


def attach(package: str, submodules=None, attributes: dict | None = None):
    """``(__getattr__, __dir__, __all__)``; ``submodules`` default: every module found in the package's folder."""
    if submodules is None:
        found = pkgutil.iter_modules(importlib.util.find_spec(package).submodule_search_locations)
        submodules = [m.name for m in found if not m.name.startswith("_")]
    by_module: dict[str, list[str]] = {}
    for name, module in (attributes or {}).items():
        by_module.setdefault(module, []).append(name)
    return lazy_loader.attach(package, submodules=submodules, submod_attrs=by_module)
