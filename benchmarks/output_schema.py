"""What typing the query documents' fields costs a validating client, per result.

The SDK's client validates every structured result against the tool's output schema with
`jsonschema` (a cached validator, `best_match(iter_errors(...))`). Issue 14 typed each document
field from the spec; before, the fields were only named in a description. Both schemas are
validated here against the same `find_orders` result, interleaved round by round, and the
table gives the median per-result cost and the median of the per-round ratios.

A second table prices issue 40's portable form (every `type` list written as `anyOf` branches,
what the MCP Inspector's `--strict` check asks for) against the type lists it replaced: the
query tools' schema as `policy/schema.py` writes it against as published, and a recall result
of ten memories against pydantic's own schema folded into type lists (the form published
before issue 40) and as pydantic writes it.

    python benchmarks/output_schema.py [--docs 20] [--rounds 30] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from jsonschema import exceptions
from jsonschema.validators import validator_for
from lib.results import write_section  # benchmarks/lib/results.py, beside this script

from mongogate.compat.sdk import derived_output_schema
from mongogate.demo import FIND_ORDERS
from mongogate.policy.schema import DIALECT, output_schema
from mongogate.specs import QueryToolSpec
from mongogate.tools.output_schema import lean, portable
from mongogate.tools.recall_tools import RecallOut


def described_schema(spec: QueryToolSpec) -> dict[str, Any]:
    """The output schema before issue 14: document fields named in a description only."""
    fields = [f"{p} ({spec.fields[p]})" if p in spec.fields else p for p in spec.projection]
    return {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "required": ["documents", "returned", "limit", "truncated", "notice"],
        "properties": {
            "documents": {
                "type": "array",
                "items": {"type": "object", "description": f"a document holding only {', '.join(fields)}"},
            },
            "returned": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
            "truncated": {"type": "boolean"},
            "notice": {"type": "string"},
        },
    }


def folded(node: Any) -> Any:
    """`anyOf: [{"type": t, ...}, {"type": "null"}]` as `{"type": [t, "null"], ...}`: the form
    published before issue 40 (tools/output_schema.py then), for the comparison only."""
    if isinstance(node, list):
        return [folded(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: folded(v) for k, v in node.items()}
    branches = out.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        other = branches[0] if branches[1] == {"type": "null"} else branches[1]
        if isinstance(other.get("type"), str) and "enum" not in other and "type" not in out:
            rest = {k: v for k, v in out.items() if k != "anyOf"}
            return {**other, **rest, "type": [other["type"], "null"]}
    return out


def recall_result() -> dict[str, Any]:
    """A recall result of ten memories, every field filled but two nullable ones (null)."""
    memory = {
        "id": "m" * 24,
        "namespace": "default",
        "key": None,
        "text": "the customer prefers invoices by email",
        "metadata": {"source": "chat"},
        "score": 0.5,
        "similarity": 0.4,
        "matched_terms": ["invoice", "email"],
        "version": 1,
        "author": None,
        "created_at": "2026-01-05T09:00:00Z",
        "updated_at": "2026-01-05T09:00:00Z",
    }
    return {"memories": [dict(memory) for _ in range(10)], "returned": 10, "truncated": False, "notice": "n"}


def per_result_us(schema: dict[str, Any], result: dict[str, Any], repeat: int) -> float:
    validator = validator_for(schema)(schema)
    started = time.perf_counter()
    for _ in range(repeat):
        assert exceptions.best_match(validator.iter_errors(result)) is None
    return (time.perf_counter() - started) / repeat * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    docs = [
        {"number": f"AC-{i}", "status": "paid", "total": 19.5 + i, "createdAt": "2026-01-05T09:00:00Z"}
        for i in range(args.docs)
    ]
    result = {"documents": docs, "returned": len(docs), "limit": 50, "truncated": False, "notice": "n"}
    old, new = described_schema(FIND_ORDERS), output_schema(FIND_ORDERS)
    olds: list[float] = []
    news: list[float] = []
    ratios: list[float] = []
    for r in range(args.rounds):  # interleaved, alternating order: load hits both alike
        pair = [(old, olds), (new, news)] if r % 2 == 0 else [(new, news), (old, olds)]
        for schema, out in pair:
            out.append(per_result_us(schema, result, args.repeat))
        ratios.append(news[-1] / olds[-1])
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = (
        "Command: `.venv/bin/python benchmarks/output_schema.py "
        f"--docs {args.docs} --rounds {args.rounds}`.\n"
        f"Python {platform.python_version()}; {when}; load average {os.getloadavg()[0]:.1f} at the end. "
        "The machine was shared with five other engineers' "
        "test runs: absolute figures are noisy, the per-round ratio is what matters.\n\n"
        f"Client-side validation of one `find_orders` result of {args.docs} documents (what the SDK "
        "client does on every call):\n\n"
        "| output schema | median µs per result | ÷ described |\n|---|---:|---:|\n"
        f"| fields described only (before) | {statistics.median(olds):.0f} | 1.00x |\n"
        f"| fields typed from the spec (now) | {statistics.median(news):.0f} | "
        f"{statistics.median(ratios):.2f}x |\n"
    )
    body += "\n" + portable_table(result, args.rounds, args.repeat)
    print(body)
    if not args.no_write:
        write_section("output schema", body)


def portable_table(orders: dict[str, Any], rounds: int, repeat: int) -> str:
    """Type lists against `anyOf` branches, interleaved round by round, on two results."""
    recall = recall_result()
    pydantic_form = derived_output_schema(RecallOut)
    cases = {
        "find_orders: type lists (policy/schema.py)": (output_schema(FIND_ORDERS), orders),
        "find_orders: anyOf branches (published)": (portable(output_schema(FIND_ORDERS)), orders),
        "recall: pydantic's schema": (pydantic_form, recall),
        "recall: folded into type lists (before)": (folded(lean(pydantic_form)), recall),
        "recall: anyOf branches (published)": (lean(pydantic_form), recall),
    }
    for schema, result in cases.values():  # each schema accepts its result (else the row is moot)
        assert exceptions.best_match(validator_for(schema)(schema).iter_errors(result)) is None
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        for name in list(cases) if r % 2 == 0 else list(reversed(cases)):
            schema, result = cases[name]
            times[name].append(per_result_us(schema, result, max(1, repeat // 4)))
    base = {
        "find_orders": "find_orders: type lists (policy/schema.py)",
        "recall": "recall: pydantic's schema",
    }
    rows = []
    for name, values in times.items():
        ref = times[base[name.split(":")[0]]]
        ratios = [v / b for v, b in zip(values, ref, strict=True)]
        rows.append(f"| {name} | {statistics.median(values):.0f} | {statistics.median(ratios):.2f}x |")
    return (
        "Issue 40, type lists against `anyOf` branches (the ratio is per round, against the first row "
        "of the same result):\n\n| result: output schema | median µs per result | ratio |\n|---|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )


if __name__ == "__main__":
    main()
