"""`mongogate spec suggest`: a query-tool spec proposed from a real collection, or (`--check`) the
specs that read it checked against a sample.

Documents are read through the read-only query connection (`database.query_uri`), with
`$sample` where the server has it. The proposal is printed as a TOML block to paste under the
config file; every decision left to the operator (sensitive-looking names, drifting fields,
fields with no single type) is a comment above it.
"""

from __future__ import annotations

import argparse
import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from mongogate.cli.common import settings_from
from mongogate.cli.embed import HELP as EMBED_HELP
from mongogate.config import Settings
from mongogate.errors import ConfigError
from mongogate.specs import FieldType, FindToolSpec, QueryToolSpec, hidden_characters, overlaps_tenant

if TYPE_CHECKING:
    from mongogate.policy import FieldStats

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _quoted(text: str) -> str:
    """A TOML basic string of ``text`` (a field name is data): quotes, backslashes and every control,
    format or line-separator character escaped, so it can neither end its line or comment nor
    drive the terminal; anything else as it is (json.dumps would write surrogate pairs TOML refuses)."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def _key(name: str) -> str:
    """A field name as a TOML key, and as comments show it."""
    return name if _BARE_KEY.match(name) else _quoted(name)


def _list(names: list[str]) -> str:
    return "[" + ", ".join(_quoted(n) for n in names) + "]"


def _tool_name(collection: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", collection).strip("_-") or "collection"
    return f"find_{base}"[:64] if base[0].isalpha() else f"find_c{base}"[:64]


@dataclass
class _Fields:
    """The sampled fields, sorted: typed ones for the spec, and the notes on the others."""

    fields: dict[str, FieldType] = field(default_factory=dict)
    hidden: list[str] = field(default_factory=list)
    untyped: list[str] = field(default_factory=list)
    drifting: list[str] = field(default_factory=list)
    unprintable: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, stats: dict[str, FieldStats], tenant_field: str, n: int) -> _Fields:
        from mongogate.policy import SENSITIVE

        out = cls()
        for path, st in stats.items():
            if overlaps_tenant(path, tenant_field):
                continue
            if hidden_characters(path):  # the spec loader refuses it: a name the model would read raw
                out.unprintable.append(f"{_key(path)} ({', '.join(hidden_characters(path))})")
                continue
            kind = st.suggested()
            if kind is None:
                out.untyped.append(f"{_key(path)} ({', '.join(sorted(st.kinds))})")
                continue
            if SENSITIVE.search(path):
                out.hidden.append(f"{_key(path)} = {json.dumps(kind)}  # in {st.present} of {n}")
                continue
            out.fields[path] = kind
            other = st.others(kind)
            if other:
                found = ", ".join(f"{k} in {c}" for k, c in sorted(other.items()))
                out.drifting.append(
                    f"{_key(path)}: {kind} in {st.present - sum(other.values())} of {st.present}, {found}"
                )
        return out


def _left_out(sorted_out: _Fields) -> list[str]:
    """The comments on what the suggestion leaves out or returns with care."""
    lines: list[str] = []
    if sorted_out.hidden:
        lines += [
            "# left out: these names look sensitive. To let callers filter on one without ever reading",
            "# it, add it to `fields` only (a hidden field: its values can still be tested by filters);",
            "# to return it, also add it to `projection`:",
            *(f"#   {h}" for h in sorted_out.hidden),
        ]
    if sorted_out.untyped:
        lines.append(f"# left out, no single type to declare: {', '.join(sorted_out.untyped)}")
    if sorted_out.unprintable:
        lines.append(
            "# left out, names holding control or bidirectional characters (a spec refuses them): "
            + ", ".join(sorted_out.unprintable)
        )
    if sorted_out.drifting:
        lines += [
            "# mixed types (values of another type are returned as null and counted in type_mismatches):",
            *(f"#   {d}" for d in sorted_out.drifting),
        ]
    return lines


def suggest(
    collection: str, tenant_field: str, docs: list[dict[str, Any]], total: int
) -> tuple[str, QueryToolSpec]:
    """The TOML block (comments, then `[[query_tools]]`) and the spec it holds (validated)."""
    from mongogate.policy import field_stats, missing_tenant

    n = len(docs)
    if n == 0:
        raise ConfigError(
            f"collection {collection!r} is empty (or missing): there is nothing to suggest from"
        )
    stats = field_stats(docs, skip={"_id", tenant_field})
    absent = missing_tenant(docs, tenant_field)
    if absent == n:
        seen = ", ".join(list(stats)[:20])
        raise ConfigError(
            f"tenant field {tenant_field!r} holds no string in any of the {n} sampled documents of "
            f"{collection!r}; fields seen: {seen}"
        )
    sorted_out = _Fields.of(stats, tenant_field, n)
    fields, untyped = sorted_out.fields, sorted_out.untyped
    if not fields:
        raise ConfigError(
            f"no field of {collection!r} has a single usable type: {', '.join(untyped) or 'none'}"
        )
    dates = sorted((p for p, k in fields.items() if k == "date"), key=lambda p: -stats[p].present)
    sort: dict[str, Literal[1, -1]] | None = {dates[0]: -1} if dates else None
    index: list[tuple[str, Literal[1, -1]]] = [(tenant_field, 1)]
    if dates:
        index.append((dates[0], -1))
    spec = FindToolSpec(
        name=_tool_name(collection),
        description=f"Find the caller's {collection}",
        collection=collection,
        tenant_field=tenant_field,
        projection=list(fields),
        fields=fields,
        sort=sort,
        index=index,
    )
    lines = [
        f"# suggested by `mongogate spec suggest` from {n} sampled documents of {collection!r} "
        f"({total:,} in the collection); review before use",
    ]
    if absent:
        lines.append(f"# {absent} sampled documents have no string {tenant_field!r}: no caller can read them")
    lines += _left_out(sorted_out)
    lines += [
        "[[query_tools]]",
        f"name = {json.dumps(spec.name)}",
        f"description = {json.dumps(spec.description)}  # say what the tool is for: the model reads it",
        f"collection = {json.dumps(collection)}",
        f"tenant_field = {json.dumps(tenant_field)}",
        f"projection = {_list(spec.projection)}",
        "fields = { " + ", ".join(f"{_key(k)} = {json.dumps(v)}" for k, v in fields.items()) + " }",
    ]
    if sort:
        lines.append("sort = { " + ", ".join(f"{_key(k)} = {v}" for k, v in sort.items()) + " }")
    lines.append("index = [" + ", ".join(f"[{_quoted(k)}, {d}]" for k, d in index) + "]")
    # JSON for mongosh; DEL, which json.dumps leaves as it is, cannot stand in a TOML comment
    keys = ", ".join(f"{json.dumps(k)}: {d}".replace("\x7f", "\\u007f") for k, d in index)
    lines.append(
        f"# mongogate creates no index: db.getCollection({json.dumps(collection)}).createIndex({{{keys}}})"
    )
    return "\n".join(lines), spec


def drift_lines(spec: QueryToolSpec, docs: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Lines describing how a sample fits ``spec``, and how many fields drift."""
    from mongogate.policy import drift, missing_tenant

    out = []
    drifting = 0
    n = len(docs)
    for d in drift(spec, docs):
        if d.wrong:
            drifting += 1
            found = ", ".join(f"{k} in {c}" for k, c in sorted(d.wrong.items()))
            out.append(
                f"query tool {spec.name}: type drift: {d.field} declared {d.declared}, found {found} of {n} "
                "sampled documents (returned as null, counted in type_mismatches)"
            )
        elif d.present == 0:
            out.append(f"query tool {spec.name}: {d.field} is in none of {n} sampled documents")
    absent = missing_tenant(docs, spec.tenant_field)
    if absent:
        out.append(
            f"query tool {spec.name}: {absent} of {n} sampled documents have no string "
            f"{spec.tenant_field!r}: no caller can read them"
        )
    return out, drifting


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    from mongogate.cli.embed import all_specs
    from mongogate.db import Database
    from mongogate.policy import sample

    specs = (
        [s for s in all_specs(settings, args.embed) if s.collection == args.collection] if args.check else []
    )
    if args.check and not specs:
        raise ConfigError(
            f"--check: no query tool reads collection {args.collection!r} (config file or --embed); "
            "without --check this command proposes one"
        )
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        coll = db.query[args.collection]
        total = await coll.estimated_document_count()
        docs = await sample(coll, args.sample)
    finally:
        await db.close()
    if not args.check:
        block, _ = suggest(args.collection, args.tenant_field, docs, total)
        print(block)
        return 0
    problems = 0
    for spec in specs:
        lines, drifting = drift_lines(spec, docs)
        problems += drifting
        print(f"query tool {spec.name}: {len(docs)} documents sampled of {total:,} in {spec.collection!r}")
        print("\n".join(lines) if lines else f"query tool {spec.name}: every declared field matches its type")
    return 1 if problems else 0


def cmd_spec(args: argparse.Namespace) -> int:
    if not args.check and not args.tenant_field:
        raise ConfigError("spec suggest needs --tenant-field F (the field holding each document's tenant)")
    if not 1 <= args.sample <= 10_000:
        raise ConfigError(f"--sample must be from 1 to 10000, got {args.sample}")
    return anyio.run(_run, settings_from(args), args)


def register(sub: Any, with_config: Any) -> None:
    s = with_config(
        sub.add_parser(
            "spec", help="propose a query-tool spec from a collection, or check the specs reading it"
        )
    )
    s.add_argument(
        "action", choices=["suggest"], help="suggest: sample the collection, print a [[query_tools]] block"
    )
    s.add_argument("--collection", required=True, help="the collection to sample")
    s.add_argument(
        "--tenant-field", help="the field holding each document's tenant (required without --check)"
    )
    s.add_argument("--sample", type=int, default=200, metavar="N", help="documents to sample (default 200)")
    s.add_argument(
        "--check", action="store_true", help="check the specs reading the collection against the sample"
    )
    s.add_argument("--embed", action="append", default=[], metavar="MODULE:ATTR", help=EMBED_HELP)
    s.set_defaults(func=cmd_spec)
