"""What a package declares it stores per tenant and subject: the target of an erasure, and the
collections a package's documents of it are in (removed, or kept and redacted), in order.

Each domain package says it once, in its own `erase.py` (`ERASURE`, a `Declared`), and
`assembly.erasure_plan` lists the packages: a collection added later is one more `Removed(...)`
line in its package, and `tests/test_erase_declared.py` fails while any collection mongogate
writes is declared by none (a `Kept` says why a collection holds nothing of any tenant).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mongogate.errors import InvalidInput
from mongogate.values import Doc, clip, is_storable

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

    from mongogate.clock import Clock

#: the longest tenant or subject an erasure takes (a name longer than any credential carries)
MAX_NAME_CHARS = 4096
#: how long-term memory stores the tenant-wide owner (`recall.model.TENANT_OWNER`): never a subject
TENANT_WIDE = "*"


@dataclass(frozen=True)
class Target:
    """Whose documents an erasure removes: a tenant's, or one subject's within a tenant."""

    tenant: str
    subject: str | None = None

    @classmethod
    def of(cls, tenant: object, subject: object = None) -> Target:
        """The target checked: names mongogate could have stored, else `InvalidInput` saying why."""
        t = _name(tenant, "the tenant")
        if not t.isprintable() or t.strip() != t:
            raise InvalidInput(
                f"no tenant can be {clip(repr(t))}: authentication refuses tenants with control "
                "characters or surrounding spaces, so nothing is stored under it"
            )
        if subject is None:
            return cls(t)
        s = _name(subject, "the subject")
        if s == TENANT_WIDE:
            raise InvalidInput(
                "'*' is not a subject: it is how the tenant-wide memories are stored; "
                "erase the whole tenant with --tenant alone"
            )
        return cls(t, s)

    def describe(self) -> str:
        who = f"tenant {self.tenant!r}"
        return who if self.subject is None else f"subject {self.subject!r} of {who}"


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, not {clip(repr(value))}")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{what} is {len(value)} characters; at most {MAX_NAME_CHARS}")
    if not is_storable(value):
        raise InvalidInput(f"{what} is not valid Unicode (it holds a lone surrogate)")
    return value


#: the filter of a target's documents in one collection; None: the collection holds none of that
#: kind of target (a subject in a collection that stores only tenants)
Match = Callable[[Target], Doc | None]


@dataclass(frozen=True)
class Removed:
    """The target's documents of `collection`, deleted."""

    collection: str
    match: Match
    #: what the receipt says where `match` gives None
    unmatched: str = "holds no subject's documents (only the tenant's)"


@dataclass(frozen=True)
class Redacted:
    """The target's documents of `collection`, kept with what identifies them replaced:
    `update(target, erasure_id)` is the update each gets by `_id` (an update document, or a
    pipeline whose condition re-checks the document); after it, `match` must not match it."""

    collection: str
    match: Match
    update: Callable[[Target, str], Doc | list[Doc]]
    unmatched: str = "holds no subject's documents (only the tenant's)"


@dataclass(frozen=True)
class Kept:
    """A collection mongogate writes that holds no tenant's documents, and why."""

    collection: str
    why: str


Part = Removed | Redacted


class Sweeping(Protocol):
    """What an `around` gets from the running erasure."""

    clock: Clock

    async def beat(self) -> None:
        """Keep the erasure's lease (call it between long runs of writes)."""


#: the bracket a package's parts are erased in (long-term memory: its scopes' write bracket)
Around = Callable[["AsyncDatabase[Doc]", Target, Sweeping], AbstractAsyncContextManager[None]]
#: a test hook called at named points between a write and what follows (crash tests)
Fault = Callable[[str], None]
Beat = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Declared:
    """What one package stores per tenant and subject, in the order it is erased."""

    package: str
    parts: tuple[Part, ...]
    kept: tuple[Kept, ...] = ()
    #: entered before the first part and left after the last, on every run (a resumed one too)
    around: Around | None = None
    #: said on every receipt (what this package cannot find for a target, and why)
    notes: Callable[[Target], tuple[str, ...]] | None = None

    def collections(self) -> tuple[str, ...]:
        return (*(p.collection for p in self.parts), *(k.collection for k in self.kept))
