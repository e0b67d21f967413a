"""LangGraph on mongogate: `MongogateSaver` (checkpoints, fenced by run leases), `MongogateStore`.

Needs the ``langgraph`` extra (installed from a clone: docs/operations.md, Install). Importing
this package imports langgraph; ``import mongogate`` never does (docs/frameworks.md).
"""

from __future__ import annotations

from mongogate.langgraph.saver import MongogateSaver
from mongogate.langgraph.store import MongogateStore

__all__ = ["MongogateSaver", "MongogateStore"]
