"""Public names of a package whose modules are imported when a name is first used (PEP 562)."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Collection, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], names: Mapping[str, str], submodules: Collection[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each of ``names`` (public name -> the module that defines it) and
    of ``submodules`` (the package's own modules) is imported on its first use and then kept in ``namespace`` (the
    package's ``globals()``), so later uses cost nothing. A name defined by the package's module of the same name
    (``pack`` in ``datasets/pack.py``) stays that function once the module is imported."""
    package = namespace["__name__"]
    _bind_functions_over_modules(package, [name for name, module in names.items() if module == f"{package}.{name}"])

    def __getattr__(name: str) -> Any:
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in names:
            value = getattr(importlib.import_module(names[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__


def _bind_functions_over_modules(package: str, names: Collection[str]) -> None:
    """Keep each of ``names``, a function defined by the package's module of the same name, bound to the function
    when that module is imported: the import system binds a submodule to its package by ``setattr``, which would
    put the module where the function was (or will be) found."""
    functions = frozenset(names)
    if not functions:
        return

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in functions and isinstance(value, types.ModuleType) and value.__name__ == f"{package}.{name}":
                value = getattr(value, name, value)
            super().__setattr__(name, value)

    sys.modules[package].__class__ = _Package
