"""A module imported on first use, not when the module naming it is imported.

numpy costs about 100 ms of CPU to import (benchmarks/startup.py, load 2), and only recall,
message search and the embedders use it, never the answer to `initialize`, `tools/list` or
`/readyz`. Those modules write::

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = lazy("numpy")

so mypy sees the real module, and the process imports numpy at the first ``np.<name>`` read
(tests/test_lazy.py pins that `serve` does not). After that first read the proxy holds
numpy's names itself: a read costs what a module attribute costs.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


class _Lazy(ModuleType):
    """Stands in for the module ``name`` until one of its attributes is read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        # Only names the proxy does not hold reach here: the first read of all, and later any
        # name the module added after it was loaded (numpy's own module __getattr__ serves those).
        if attr.startswith("_Lazy__"):
            raise AttributeError(attr)
        with self.__lock:
            module = importlib.import_module(self.__name__)
            if "__file__" not in self.__dict__:  # first read: copy the module's names once
                self.__dict__.update({k: v for k, v in vars(module).items() if k != "__getattr__"})
        return getattr(module, attr)


def lazy(name: str) -> Any:
    """A stand-in for module ``name`` that imports it at the first attribute read."""
    return _Lazy(name)


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562): each name of ``exports`` imported from the
    module it maps to at its first read, then held by the package. For names a started server
    never reads (the erasure declarations, memory import and export): the package writes the
    imports under ``TYPE_CHECKING`` too, so mypy and the import contracts see them."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__all__ = ["lazy", "lazy_exports"]
