"""What the audit trail keeps of an erased tenant or subject: its events in `audit_events` stay
(that a call was refused, by which tool, why, when and on which server is the deployment's
record) with everything that identifies the caller or repeats what it sent taken out.

Kept: `event`, `ts`, `tool`, `reason`, `instance`, the counts (`returned`, `truncated`, `ms`,
`trimmed`, `forbidden_cut`). Set to null: `principal`, `request_id` (it joins the event to the
server's log lines, which name the tenant), and for a tenant's erasure `tenant` (a subject's
events keep their tenant). Removed: `filter`, `offending`, `path`, `forbidden` (the caller's
arguments and field paths) and `rpc_id` (the client's own id). `erased` holds the erasure's id
(its receipt). An event is matched by its tenant and, for a subject, by `principal_id`, the
subject exactly as authenticated (`principal` holds it as shown in logs, control characters
escaped by `server/auth/verify.py` printable, which is not one-to-one); an event written before
`principal_id` existed, by `principal` in either form.

The audit file (`audit.path`, and the fallback of the MongoDB sink) is not rewritten: it is
append-only, other server processes append to it while they serve, and its lines are copied
to stderr and wherever the operator ships them, which no rewrite reaches. docs/security.md,
"Erasure", says what an operator does with it.
"""

from __future__ import annotations

from mongogate.audit.store import COLLECTION
from mongogate.erasure import Declared, Redacted, Target
from mongogate.values import Doc

#: what an erased caller's event loses: its arguments and its client's id
PAYLOAD = ("filter", "offending", "path", "forbidden", "rpc_id")


def shown(subject: str) -> str:
    """The subject as audit events hold it: every non-printable character escaped (the form
    `server/auth/verify.py` printable gives; tests/audit/test_erase.py compares the two)."""
    if subject.isprintable():
        return subject
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in subject)


def events(target: Target) -> Doc:
    if target.subject is None:
        return {"tenant": target.tenant}
    # events written before `principal_id` existed are found by their display form, which is not
    # one-to-one: such an event of subject 'x<newline>' is also taken for the literal 'x\\n'
    forms = sorted({target.subject, shown(target.subject)})
    legacy = {"principal_id": {"$exists": False}, "principal": {"$in": forms}}
    return {"tenant": target.tenant, "$or": [{"principal_id": target.subject}, legacy]}


def redacted(target: Target, erasure_id: str) -> Doc:
    cleared: Doc = {"principal": None, "principal_id": None, "request_id": None, "erased": erasure_id}
    if target.subject is None:
        cleared["tenant"] = None
    return {"$set": cleared, "$unset": dict.fromkeys(PAYLOAD, "")}


def notes(target: Target) -> tuple[str, ...]:
    return (
        "the audit file (audit.path) is not rewritten: it is append-only and copied to stderr "
        "and log shippers; keep it under a retention (docs/security.md, 'Erasure')",
    )


ERASURE = Declared("audit", parts=(Redacted(COLLECTION, events, redacted),), notes=notes)
