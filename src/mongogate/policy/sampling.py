"""What a collection actually holds: a sample of its documents, the type of each field in it, and
where stored values drift from a spec's declared types.

Used by `mongogate spec suggest` (propose a spec from a real collection) and `mongogate check`
(report drift per query tool). Drift is counted with the renderer's own test
(``render.type_check``), so "3 of 200 documents drift" means exactly the values a query would
return as null. Plain pymongo, read-only: only ``aggregate($sample)`` or ``find`` is called.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bson import Decimal128, ObjectId
from pymongo.errors import OperationFailure, PyMongoError

from mongogate.errors import StorageError
from mongogate.policy.render import type_check
from mongogate.specs import FieldType, QueryToolSpec

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

#: the most documents one sample reads
MAX_SAMPLE = 10_000
#: nested documents are described down to this many levels of dotted paths
MAX_DEPTH = 3
#: field names an operator should decide on before projecting (credentials, personal data, notes)
SENSITIVE = re.compile(
    r"pass(word|wd)?|pwd|secret|token|api_?key|hash|salt|ssn|social|credit|card|cvv|iban|"
    r"email|phone|birth|dob|address|internal|private|note",
    re.IGNORECASE,
)


_DECLARABLE: dict[str, FieldType] = {
    "string": "string",
    "number": "number",
    "int": "int",
    "bool": "bool",
    "date": "date",
    "objectId": "objectId",
}


def kind_of(value: Any) -> str:
    """The spec type a stored scalar has (``string number int bool date objectId``), or what it is
    instead (``null``, ``object``, ``array``, or its BSON type name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float | Decimal128):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime):
        return "date"
    if isinstance(value, ObjectId):
        return "objectId"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


async def sample(
    collection: AsyncCollection[Any], size: int, max_time_ms: int = 10_000
) -> list[dict[str, Any]]:
    """Up to ``size`` documents, picked at random (``$sample``) where the server can, else the first."""
    size = max(1, min(size, MAX_SAMPLE))
    try:
        try:
            cursor = await collection.aggregate([{"$sample": {"size": size}}], maxTimeMS=max_time_ms)
            return list(await cursor.to_list(None))
        except OperationFailure:  # an engine without $sample: the first documents instead
            return list(await collection.find({}, limit=size, max_time_ms=max_time_ms).to_list(None))
    except PyMongoError as e:
        raise StorageError(f"could not sample collection {collection.name!r}") from e


def value_at(doc: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """(present, value) at a dotted path; through an array of documents, the list of values."""
    value: Any = doc
    for part in path.split("."):
        if isinstance(value, Mapping):
            if part not in value:
                return False, None
            value = value[part]
        elif isinstance(value, list):
            picked = [v[part] for v in value if isinstance(v, Mapping) and part in v]
            if not picked:
                return False, None
            value = picked
        else:
            return False, None
    return True, value


@dataclass
class FieldStats:
    """One field (a dotted path for nested ones) across a sample."""

    path: str
    present: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    array: int = 0  # documents where it held an array (of scalars)

    def add(self, value: Any) -> None:
        self.present += 1
        if isinstance(value, list):
            self.array += 1
            inner = {kind_of(v) for v in value if v is not None}
            self.kinds[inner.pop() if len(inner) == 1 else ("mixed" if inner else "null")] += 1
        else:
            self.kinds[kind_of(value)] += 1

    def suggested(self) -> FieldType | None:
        """The declared type that fits the most documents (ints count as numbers when both occur)."""
        kinds = Counter({k: n for k, n in self.kinds.items() if k != "null"})
        if "int" in kinds and "number" in kinds:
            kinds["number"] += kinds.pop("int")
        best = [k for k, _ in kinds.most_common() if k in _DECLARABLE]
        return _DECLARABLE[best[0]] if best else None

    def others(self, declared: str) -> dict[str, int]:
        """Documents whose value is not of ``declared`` (the ones a query returns as null)."""
        ok = {"number": {"number", "int"}}.get(declared, {declared})
        return {k: n for k, n in self.kinds.items() if k not in ok and k != "null"}


def field_stats(docs: list[dict[str, Any]], skip: set[str]) -> dict[str, FieldStats]:
    """Every field in ``docs`` (nested documents as dotted paths), in first-seen order."""
    stats: dict[str, FieldStats] = {}

    def walk(doc: Mapping[str, Any], prefix: str, depth: int) -> None:
        for key, value in doc.items():
            if not isinstance(key, str) or not key or key.startswith("$"):
                continue
            path = f"{prefix}{key}"
            if path in skip:
                continue
            if isinstance(value, Mapping) and depth < MAX_DEPTH:
                walk(value, path + ".", depth + 1)
                continue
            stats.setdefault(path, FieldStats(path)).add(value)

    for doc in docs:
        walk(doc, "", 1)
    return stats


@dataclass(frozen=True)
class Drift:
    """One declared field of a spec against a sample."""

    field: str
    declared: str
    sampled: int
    present: int
    #: found kind -> documents (values a query returns as null)
    wrong: dict[str, int]


def drift(spec: QueryToolSpec, docs: list[dict[str, Any]]) -> list[Drift]:
    """Per declared field: how many sampled documents hold it, and how many hold another type."""
    out = []
    for name, declared in spec.fields.items():
        ok = type_check(declared)
        present = 0
        wrong: Counter[str] = Counter()
        for doc in docs:
            found, value = value_at(doc, name)
            if not found:
                continue
            present += 1
            if not ok(value):
                kind = kind_of(value)
                if kind == "array":
                    kinds = sorted({kind_of(v) for v in value} - {"null"})
                    kind = "array of " + "/".join(kinds)
                wrong[kind] += 1
        out.append(Drift(name, declared, len(docs), present, dict(wrong)))
    return out


def missing_tenant(docs: list[dict[str, Any]], tenant_field: str) -> int:
    """Sampled documents without a string tenant field: no caller can ever read them."""
    return sum(1 for d in docs if not isinstance(value_at(d, tenant_field)[1], str))
