"""How `mongogate audit` prints: a table for people, JSON Lines for programs, CSV for spreadsheets.

Every value comes from what a model or a token sent: a cell never carries a raw control
character (escaped as JSON escapes it), and a CSV cell that a spreadsheet would run as a
formula (``=``, ``+``, ``-``, ``@``) is prefixed with ``'``.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from mongogate.values import clip

#: the columns of the event table and of the CSV export
EVENT_COLUMNS = ("ts", "event", "tenant", "principal", "tool", "reason", "path", "forbidden", "request_id")
SUMMARY_COLUMNS = ("tenant", "event", "reason", "count", "first", "last", "paths")
_WIDTH = {"ts": 24, "tenant": 20, "principal": 24, "tool": 28, "reason": 24, "path": 48, "forbidden": 40}
_TOP_PATHS = 3
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    """One printable line: control characters escaped, never interpreted by a terminal."""
    if value is None:
        return "-"
    if isinstance(value, list):
        text = ",".join(str(f.get("name")) if isinstance(f, dict) else str(f) for f in value)
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if text.isprintable() else json.dumps(text)[1:-1]


def event_row(event: dict[str, Any]) -> dict[str, str]:
    return {col: cell(event.get(col)) for col in EVENT_COLUMNS}


def summary_rows(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Refusals and failures by tenant and reason: count, first and last seen, frequent paths."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    paths: dict[tuple[str, str, str], Counter[str]] = {}
    for e in events:
        kind = str(e.get("event"))
        if kind == "query":
            continue
        key = (str(e.get("tenant")), kind, str(e.get("reason")))
        ts = str(e.get("ts"))
        row = rows.setdefault(key, {"count": 0, "first": ts, "last": ts})
        row["count"] += 1
        row["first"], row["last"] = min(row["first"], ts), max(row["last"], ts)
        paths.setdefault(key, Counter())[str(e.get("path"))] += 1
    out = []
    for key, row in rows.items():
        tenant, kind, reason = key
        top = paths[key].most_common(_TOP_PATHS)
        out.append(
            {
                "tenant": tenant,
                "event": kind,
                "reason": reason,
                "count": row["count"],
                "first": row["first"],
                "last": row["last"],
                "paths": [{"path": p, "count": n} for p, n in top],
            }
        )
    out.sort(key=lambda r: (-r["count"], r["tenant"], r["reason"]))
    return out


def _paths_text(paths: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['path']} ({p['count']})" for p in paths)


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """Aligned columns; long cells are shortened with an ellipsis."""
    cells = [[_fit(cell(_paths_text(r[c]) if c == "paths" else r.get(c)), c) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _fit(text: str, column: str) -> str:
    width = _WIDTH.get(column, 60)
    return text if len(text) <= width else clip(text, width - 1, mark="…")


def to_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_no_formula(cell(_paths_text(r[c]) if c == "paths" else r.get(c))) for c in columns])
    return out.getvalue()


def _no_formula(text: str) -> str:
    return "'" + text if text.startswith(_FORMULA) else text


def summary_text(s: dict[str, Any], where: str) -> str:
    lines = [
        f"{s['rejected']} rejected filter(s), {s['storage_errors']} storage error(s), "
        f"{s['queries']} query event(s) in {cell(where)}"
    ]
    for title, key in (("by reason", "by_reason"), ("by tool", "by_tool"), ("by tenant", "by_tenant")):
        if s[key]:
            lines.append(f"  {title}: " + ", ".join(f"{cell(k)} {v}" for k, v in s[key].items()))
    return "\n".join(lines)
