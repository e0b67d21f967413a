"""What memory stores per tenant and subject: conversations (sessions, their summaries and messages).

Every one of these documents carries `tenant`: the tenant, or, with conversations per subject
(`[memory] conversations = "scope"` under `[memory.long_term] scope = "subject"`), the tenant and
the subject joined by U+001F (`tools/base.py` conversations_of; a tenant holds no control
character, so the joined form names one subject of one tenant). A tenant's conversations are both
forms (the setting may have changed); a subject's, the joined form only. Sessions go first: a turn
still running finds its session gone and writes no message after the erasure passed.

A summary also names the subject that stored it (`author`, in `summaries` and copied onto its
session as `summary.author`). In conversations that stay (the tenant's, where a subject's are
not told apart) a subject's erasure sets that `author` to null, by `_id`, only while it still
names the subject: the summary is the tenant's, the name is the subject's.
"""

from __future__ import annotations

from mongogate.erasure import Declared, Redacted, Removed, Target
from mongogate.leases import keep_unless, literal, same
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


def authored(target: Target) -> Doc | None:
    """Summaries the subject stored in conversations that stay (any of its tenant's): `author`."""
    if target.subject is None:
        return None  # a tenant's erasure removes them
    return {"$and": [conversations(Target(target.tenant)), {"author": target.subject}]}


def published(target: Target) -> Doc | None:
    """Sessions showing a summary the subject stored (`summary.author`)."""
    if target.subject is None:
        return None
    return {"$and": [conversations(Target(target.tenant)), {"summary.author": target.subject}]}


def unattributed(target: Target, erasure_id: str) -> list[Doc]:
    """`author` set to null, only while it still names the subject."""
    return [keep_unless(same("author", target.subject), {"author": literal(None)})]


def unpublished(target: Target, erasure_id: str) -> list[Doc]:
    """The session's `summary.author` set to null, only while it still names the subject."""
    summary = {"$mergeObjects": ["$summary", {"author": literal(None)}]}
    return [keep_unless(same("summary.author", target.subject), {"summary": summary})]


#: what the receipt says of a tenant's erasure for the redactions
REMOVED_WITH_THEM = "a tenant's erasure removes its summaries: none is kept to redact"


def notes(target: Target) -> tuple[str, ...]:
    if target.subject is None:
        return ()
    return (
        'conversations stored for the whole tenant ([memory] conversations = "tenant", or '
        '[memory.long_term] scope = "tenant") carry no subject: a subject\'s erasure cannot tell '
        "them apart; they go with the tenant's (the summaries it stored there lose their author)",
    )


ERASURE = Declared(
    "memory",
    parts=(
        Removed("sessions", conversations),
        Removed("summaries", conversations),
        Removed("messages", conversations),
        Redacted("summaries", authored, unattributed, REMOVED_WITH_THEM),
        Redacted("sessions", published, unpublished, REMOVED_WITH_THEM),
    ),
    notes=notes,
)
