"""Whose data a call reads and writes: one value, `MemoryScope`, for conversations (sessions,
messages, summaries: `memory/`) and long-term memories (`recall/`).

A scope is a tenant, and a subject when the data is per subject. The tenant always comes from
authentication (the `Principal`), never from a tool argument; the subject is the authenticated
identity (`Principal.identity`), never its escaped display form. The caller's scopes are built
once per call from the settings (`scope_for`: memories, `[memory.long_term] scope`;
`conversations_for`: conversations, `[memory] conversations`) and travel as this value; each
store writes and filters the stored form the value gives:

- a memory stores `tenant` and `owner` (`match`): `owner` is the subject, or "*" for a tenant-wide
  memory (`TENANT_OWNER`; under scope "subject" the subject "*" is refused, so the two never meet);
- a conversation stores one `tenant` field (`stored_tenant`): the tenant alone when conversations
  are tenant-wide, else the tenant and the subject joined by U+001F. That is the form stored since
  conversations became per subject, kept byte for byte so existing databases keep working. A tenant
  holds no control characters (auth refuses them), so the joined form is one-to-one and never
  equals a plain tenant: one subject never sees another's sessions, and no tenant-wide session
  shows up per subject (a subject named "*" included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from mongogate.errors import AuthError

__all__ = [
    "SUBJECT_SEPARATOR",
    "TENANT_OWNER",
    "MemoryScope",
    "ScopeFields",
    "conversations_for",
    "scope_for",
    "tenant_of_stored",
]

#: the `owner` stored on every memory of a tenant-wide scope (scope = "tenant")
TENANT_OWNER = "*"
#: between the tenant and the subject in a per-subject conversation's stored `tenant`
SUBJECT_SEPARATOR = "\x1f"


class ScopeFields(TypedDict):
    """The scope every memory and history entry carries, and every query of them filters on."""

    tenant: str
    owner: str


@dataclass(frozen=True)
class MemoryScope:
    """The tenant, and the subject when the data is per subject (None: tenant-wide)."""

    tenant: str
    subject: str | None = None

    @property
    def owner(self) -> str:
        """A memory's stored `owner`: the subject, or `TENANT_OWNER`."""
        return TENANT_OWNER if self.subject is None else self.subject

    def match(self) -> ScopeFields:
        """The scope filter every query of memories and their history starts from: the one place
        it is written (`recall`'s `RecallFilter` adds the namespace, liveness and metadata)."""
        return {"tenant": self.tenant, "owner": self.owner}

    @property
    def stored_tenant(self) -> str:
        """A conversation's stored `tenant`, written on its session, messages and summaries and
        filtered on by every read and write of them (see the module's docstring)."""
        if self.subject is None:
            return self.tenant
        return f"{self.tenant}{SUBJECT_SEPARATOR}{self.subject}"


def tenant_of_stored(stored: str) -> str:
    """The tenant of a conversation's stored `tenant` (`MemoryScope.stored_tenant`), for a writer
    that holds only the stored form (a write's listener): one-to-one, as the module's docstring
    says, so this is its exact inverse."""
    return stored.split(SUBJECT_SEPARATOR, 1)[0]


def scope_for(scope: Literal["tenant", "subject"], tenant: str, subject: str) -> MemoryScope:
    """The caller's memories under `[memory.long_term] scope`; the tenant always from authentication.

    Under "subject", the subject "*" would read as the tenant-wide owner: it is refused. `subject`
    is the subject as authenticated (`Principal.identity`), never its escaped display form.
    """
    if scope == "tenant":
        return MemoryScope(tenant)
    if subject == TENANT_OWNER:
        raise AuthError("the subject '*' is reserved under memory.long_term.scope = 'subject'")
    _unicode(subject, "memories")
    return MemoryScope(tenant, subject)


def conversations_for(
    conversations: Literal["scope", "tenant"],
    scope: Literal["tenant", "subject"],
    tenant: str,
    subject: str,
) -> MemoryScope:
    """The caller's conversations: per subject when conversations follow the long-term scope
    (`[memory] conversations = "scope"`, the default) and that scope is "subject"; else the
    tenant's. Every conversation tool, prompt and resource reads and writes through it."""
    if conversations == "scope" and scope == "subject":
        _unicode(subject, "conversations")
        return MemoryScope(tenant, subject)
    return MemoryScope(tenant)


def _unicode(subject: str, what: str) -> None:
    try:
        subject.encode("utf-8")
    except UnicodeEncodeError:
        raise AuthError(f"the caller's subject is not valid Unicode; it cannot own {what}") from None
