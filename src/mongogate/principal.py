"""Who is calling. The tenant always comes from authentication, never from a tool argument."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    tenant: str
    subject: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)
