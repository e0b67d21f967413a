"""The memory benchmark's figures and tables: Stats, SizeResult, render() and findings().

Split from benchmarks/memory.py so the measuring script stays short; nothing here times anything.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

WINDOW = 40


@dataclass(frozen=True)
class Stats:
    p50: float  # milliseconds
    p95: float

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        ordered = sorted(samples)
        rank = max(1, math.ceil(0.95 * len(ordered)))  # nearest-rank p95: of 30, the 29th smallest
        return cls(statistics.median(ordered) * 1e3, ordered[rank - 1] * 1e3)


@dataclass(frozen=True)
class SizeResult:
    size: int
    t: dict[
        str, Stats
    ]  # ours, bare, bare_inc, bare_insert, naive, ours_load, bare_load, bare_load1, naive_load
    commands: dict[str, list[str]]  # operation -> command names, as the listener saw them
    ours_doc_bytes: int
    naive_doc_bytes_before: int
    naive_doc_bytes_after: int
    seed_s: float


def ms(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def kib(n: int) -> str:
    return f"{n:,} B" if n < 10_000 else f"{n / 1024:,.0f} KiB"


def both(x: Stats) -> str:
    return f"{ms(x.p50)} / {ms(x.p95)}"


def render(results: list[SizeResult], reps: int, warmup: int, nbytes: int) -> list[str]:
    lines = [
        f"Latency in ms, median (p50) and p95 over {reps} timed operations per cell after {warmup} "
        f"untimed; messages of {nbytes} content bytes (turns of a user message and an assistant tool "
        f"call, so no append is a final answer); load window {WINDOW}.",
        "",
        "**Append** (`engine` = a raw `insert_one` into a collection of the same size with the same indexes)",
        "",
        "| session | ours p50 / p95 | engine p50 / p95 | ours − engine (p50) | ours ÷ engine "
        "| naive p50 / p95 | naive ÷ ours (p50) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o, e, n = r.t["ours"], r.t["bare_insert"], r.t["naive"]
        lines.append(
            f"| {r.size:,} | {both(o)} | {both(e)} | {ms(o.p50 - e.p50)} | {ratio(o.p50, e.p50)} "
            f"| {both(n)} | {ratio(n.p50, o.p50)} |"
        )
    lines += [
        "",
        "**Where our append's time goes** (p50; `bare` = the same two round trips, `$inc` findAndModify "
        "then insert_one, issued with pymongo alone, each timed; ours − bare = mongogate's own share)",
        "",
        "| session | ours | bare | bare: `$inc` | bare: insert_one | ours − bare |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        op50, bp50 = r.t["ours"].p50, r.t["bare"].p50
        lines.append(
            f"| {r.size:,} | {ms(op50)} | {ms(bp50)} | {ms(r.t['bare_inc'].p50)} "
            f"| {ms(r.t['bare_insert'].p50)} | {ms(op50 - bp50)} |"
        )
    lines += [
        "",
        f"**Load** (`load_context({WINDOW})` vs read the naive document, slice the last {WINDOW}, cut to "
        f"the first user message; `bare` = load_context's one find, the newest {WINDOW + 1} of "
        "{session_id, tenant} by seq, with pymongo alone; `bare, limit 1` = the same find returning one)",
        "",
        "| session | ours p50 / p95 | bare p50 | bare, limit 1 p50 | naive p50 / p95 | naive ÷ ours (p50) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o, n = r.t["ours_load"], r.t["naive_load"]
        lines.append(
            f"| {r.size:,} | {both(o)} | {ms(r.t['bare_load'].p50)} | {ms(r.t['bare_load1'].p50)} "
            f"| {both(n)} | {ratio(n.p50, o.p50)} |"
        )
    lines += [
        "",
        "**Document size** (BSON)",
        "",
        "| session | ours: one message | naive: session document (seeded → after the run) |",
        "|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.size:,} | {kib(r.ours_doc_bytes)} | {kib(r.naive_doc_bytes_before)} → "
            f"{kib(r.naive_doc_bytes_after)} |"
        )
    return lines


def findings(results: list[SizeResult]) -> list[str]:
    """The bullets under the tables, from this run's numbers (nothing hand-copied)."""
    at = " at " + ", ".join(f"{r.size:,}" for r in results) + " messages"
    cmds = {op: sorted({", ".join(r.commands[op]) for r in results}) for op in results[0].commands}
    shown = {op: "` / `".join(v) for op, v in cmds.items()}

    def ratios(a: str, b: str) -> str:
        return ", ".join(ratio(r.t[a].p50, r.t[b].p50) for r in results)

    share = [r.t["ours"].p50 - r.t["bare"].p50 for r in results]
    first = results[0]
    o, n, b41, b1 = (first.t[k].p50 for k in ("ours_load", "naive_load", "bare_load", "bare_load1"))
    load = f"naive ÷ ours = {ratios('naive_load', 'ours_load')}{at}. At {first.size:,} messages "
    if n > o:
        load += f"load_context beats the naive one-document read ({ms(o)} vs {ms(n)} ms)."
    else:
        load += (
            f"load_context still loses to the naive one-document read ({ms(o)} vs {ms(n)} ms) with one "
            f"round trip: the engine's find costs about {(b41 - b1) / WINDOW:.2f} ms per returned "
            f"document ({ms(b1)} ms for 1, {ms(b41)} ms for {WINDOW + 1}), more than reading one "
            f"{kib(first.naive_doc_bytes_after)} document by `_id`. Sampling the engine's threads (200 "
            "loads of 100 messages, mongoeco 4.11, once by hand) put most of its time in decoding rows "
            "one by one (`_sqlite_reader._fill_batch`) and in sort planning (`sort_requires_python`: "
            "extra SQL probes of the collection before each sorted find); the `_id` read takes the "
            "engine's fast path and mostly writes the reply."
        )
    return [
        f"- **Round trips** (a pymongo CommandListener{at}): append = `{shown['append']}` (bare "
        f"twin `{shown['bare append']}`); load_context = `{shown['load']}` (bare twin "
        f"`{shown['bare load']}`).",
        f"- **Append vs naive:** naive ÷ ours = {ratios('naive', 'ours')}{at}. Naive reads and "
        "rewrites the whole array on every append; ours inserts one small document.",
        f"- **Append vs the raw engine insert:** ours ÷ engine = {ratios('ours', 'bare_insert')}: an "
        "append is two round trips (`$inc`, then the insert). The same two with bare pymongo take "
        f"nearly as long (ours − bare = {ms(min(share))} to {ms(max(share))} ms), so the time is the "
        "engine's, not mongogate's code.",
        f"- **Load:** {load}",
        "- **Why ours still grows on this engine:** mongoeco checks uniqueness on every insert in "
        "Python over the whole collection, and runs the (session, key) lookup and sort+limit as SQL "
        "scans (`json_extract`, temp B-tree sort; `hint` does not change that). On MongoDB both are "
        'index lookups, so "cost does not grow with session length" holds for MongoDB, not for the '
        "embedded engine, whose absolute numbers these are.",
    ]
