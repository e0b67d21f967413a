"""What memory stores per tenant and subject: conversations (sessions, their summaries and messages).

Every one of these documents carries `tenant`: the tenant, or, with conversations per subject
(`[memory] conversations = "scope"` under `[memory.long_term] scope = "subject"`), the tenant and
the subject joined by U+001F (`tools/base.py` conversations_of; a tenant holds no control
character, so the joined form names one subject of one tenant). A tenant's conversations are both
forms (the setting may have changed); a subject's, the joined form only. Sessions go first: a turn
still running finds its session gone and writes no message after the erasure passed.
"""

from __future__ import annotations

from mongogate.erasure import Declared, Removed, Target
from mongogate.memory.documents import SESSION_REVISIONS
from mongogate.values import Doc

#: between the tenant and the subject in a per-subject conversation's `tenant`
JOIN = "\x1f"


def conversations(target: Target) -> Doc:
    """The target's sessions, summaries and messages: the plain tenant or any subject of it (a
    range, which an index on `tenant` serves), or one subject's joined form."""
    if target.subject is not None:
        return {"tenant": target.tenant + JOIN + target.subject}
    # every string starting with tenant + U+001F sorts between it and tenant + U+0020
    joined = {"$gte": target.tenant + JOIN, "$lt": target.tenant + " "}
    return {"$or": [{"tenant": target.tenant}, {"tenant": joined}]}


def revisions(target: Target) -> Doc:
    """The target's revision documents of session ids (`_id` = a conversation scope's `tenant`):
    removed last, so every server's completion index reads the scope again (a new incarnation)."""
    match = conversations(target)
    if "tenant" in match:
        return {"_id": match["tenant"]}
    return {"$or": [{"_id": branch["tenant"]} for branch in match["$or"]]}


def notes(target: Target) -> tuple[str, ...]:
    if target.subject is None:
        return ()
    return (
        'conversations stored for the whole tenant ([memory] conversations = "tenant", or '
        '[memory.long_term] scope = "tenant") carry no subject: a subject\'s erasure cannot tell '
        "them apart; they go with the tenant's",
    )


ERASURE = Declared(
    "memory",
    parts=(
        Removed("sessions", conversations),
        Removed("summaries", conversations),
        Removed("messages", conversations),
        Removed(SESSION_REVISIONS, revisions),
    ),
    notes=notes,
)
