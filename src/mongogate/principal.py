"""Who is calling. The tenant always comes from authentication, never from a tool argument."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    tenant: str
    subject: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)
    #: the subject exactly as authenticated, when `subject` is its escaped display form (tokens):
    #: an identity (long-term memory's owner), never shown. Escaping is not one-to-one
    #: ('a<TAB>b' and the literal 'a\tb' display alike), so an owner must never be the display form.
    subject_id: str | None = None

    @property
    def identity(self) -> str:
        """Who the caller is, for ownership: the authenticated subject, not its display form."""
        return self.subject if self.subject_id is None else self.subject_id
