"""A package's public face, loaded lazily (PEP 562): each subpackage's `__init__.py` names what callers import from
it and the module that defines each name, and the module is imported on first use. Importing a package thus costs
nothing until a name is used, so a Ray worker that needs one light module never imports torch through a face."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], list[str]]:
    """`exports`: module (relative to `package`) -> the names callers import from it. Returns the package's
    `__getattr__` and `__all__`."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in home:
            return getattr(import_module(f"{package}.{home[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, sorted(home)
