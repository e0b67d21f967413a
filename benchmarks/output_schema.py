"""What typing the query documents' fields costs a validating client, per result.

The SDK's client validates every structured result against the tool's output schema with
`jsonschema` (a cached validator, `best_match(iter_errors(...))`). Issue 14 typed each document
field from the spec; before, the fields were only named in a description. Both schemas are
validated here against the same `find_orders` result, interleaved round by round, and the
table gives the median per-result cost and the median of the per-round ratios.

    python benchmarks/output_schema.py [--docs 20] [--rounds 30] [--no-write]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from jsonschema import exceptions
from jsonschema.validators import validator_for
from lib.results import write_section  # benchmarks/lib/results.py, beside this script

from mongogate.demo import FIND_ORDERS
from mongogate.policy.schema import DIALECT, output_schema
from mongogate.specs import QueryToolSpec


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
        f"Python {platform.python_version()}; {when}. The machine was shared with five other engineers' "
        "test runs: absolute figures are noisy, the per-round ratio is what matters.\n\n"
        f"Client-side validation of one `find_orders` result of {args.docs} documents (what the SDK "
        "client does on every call):\n\n"
        "| output schema | median µs per result | ÷ described |\n|---|---:|---:|\n"
        f"| fields described only (before) | {statistics.median(olds):.0f} | 1.00x |\n"
        f"| fields typed from the spec (now) | {statistics.median(news):.0f} | "
        f"{statistics.median(ratios):.2f}x |\n"
    )
    print(body)
    if not args.no_write:
        write_section("output schema", body)


if __name__ == "__main__":
    main()
