"""The recall benchmark's tables: quality, fusion tuning and latency (nothing here times anything).

Split from benchmarks/recall.py so the measuring script stays short.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_report import Stats, both
from recall_set import FACTS, QUESTIONS

METHODS = ("text", "vector", "fused")
KINDS = ("paraphrase", "identifier", "all")
DEPTH = 50
LIMIT = 5


@dataclass
class Run:
    quality: dict[int, dict[str, dict[str, tuple[int, int, int]]]]  # distractors -> method -> kind
    tuning: list[tuple[str, tuple[int, int], int, int, bool]]
    tuning_1k: list[tuple[str, tuple[int, int], int, int, bool]]
    latency: dict[int, dict[str, Stats]]  # memories -> operation -> stats
    seed_s: dict[int, float]
    reps: dict[int, int]  # memories -> timed rounds


def pct(n: int, of: int) -> str:
    return f"{n}/{of} ({100 * n / of:.0f}%)"


def quality_table(q: dict[str, dict[str, tuple[int, int, int]]]) -> list[str]:
    out = [
        "| method | paraphrase @1 | paraphrase @3 | identifier @1 | identifier @3 | combined @1 "
        "| combined @3 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {
        "text": "exact term only (`text`)",
        "vector": "meaning only (`vector`)",
        "fused": "fused (default)",
    }
    for method in METHODS:
        cells = [pct(q[method][k][i], q[method][k][2]) for k in KINDS for i in (0, 1)]
        out.append(f"| {names[method]} | " + " | ".join(cells) + " |")
    return out


def tuning_table(rows: list[tuple[str, tuple[int, int], int, int, bool]], n: int) -> list[str]:
    """The baselines, the default, its one-knob neighbours and the best of the grid."""
    default = next(r for r in rows if r[4])
    dk = default[0].split(", ")

    def near(label: str) -> bool:
        parts = label.split(", ")
        return len(parts) == 4 and sum(a != b for a, b in zip(parts, dk, strict=True)) == 1

    grid = [r for r in rows if r[0].startswith("k=")]
    best = max(grid, key=lambda r: (r[1][0] + r[1][1], r[1][0]))
    keep = rows[:4] + [default] + [r for r in grid if near(r[0])] + ([best] if best is not default else [])
    out = [
        "| fusion | combined @1 | combined @3 | paraphrase @1 | identifier @1 |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, (a1, a3), p1, i1, is_default in keep:
        tag = (
            " **(default)**"
            if is_default
            else (" (best of the grid)" if (label, (a1, a3)) == best[:2] else "")
        )
        out.append(f"| {label}{tag} | {a1}/{n} | {a3}/{n} | {p1} | {i1} |")
    beats = sum(
        r[1][0] > max(rows[0][1][0], rows[1][1][0]) and r[1][1] >= max(rows[0][1][1], rows[1][1][1])
        for r in grid
    )
    out += [
        "",
        f"{beats} of the {len(grid)} grid points beat both single methods at @1 and match or beat them "
        "at @3.",
    ]
    return out


def latency_table(lat: dict[str, Stats]) -> list[str]:
    floor = lat["brute-force exact scan"].p50
    out = ["| operation | p50 / p95 ms | p50 ÷ brute force |", "|---|---:|---:|"]
    for name, st in lat.items():
        out.append(f"| {name} | {both(st)} | {st.p50 / floor:.2f}x |")
    return out


def render(r: Run, reps: int, warmup: int) -> list[str]:
    n = len(QUESTIONS)
    para = sum(1 for k, _, _ in QUESTIONS if k == "paraphrase")
    out = [
        f"**Quality**: {len(FACTS)} facts, {n} questions ({para} asked in other words, {n - para} naming "
        "an exact identifier that has a near-miss twin among the facts); `recall(limit=3)` through "
        "`LongTermMemory`.",
        "",
        f"On the {len(FACTS)} facts alone:",
        "",
        *quality_table(r.quality[0]),
    ]
    if 1_000 in r.quality:
        out += [
            "",
            f"Among 1,000 memories ({len(FACTS)} facts, {1_000 - len(FACTS)} generated distractors):",
            "",
        ]
        out += quality_table(r.quality[1_000])
    out += [
        "",
        f"**Fusion tuning** (the candidate lists of every question, {DEPTH} deep, fused offline; the "
        "whole grid of k x text weight x exactness power x depth is printed to stderr). On the facts "
        "alone:",
        "",
        *tuning_table(r.tuning, n),
    ]
    if r.tuning_1k:
        out += ["", "The same among 1,000 memories:", "", *tuning_table(r.tuning_1k, n)]
    for size, lat in r.latency.items():
        out += [
            "",
            f"**Latency at {size:,} memories** in one scope (seeded in {r.seed_s[size]:.0f} s, not "
            f"timed); {r.reps[size]} timed rounds after {warmup} untimed, every operation once per round "
            f"in a rotated order; limit {LIMIT}. `path:` rows fetch and rank only (the query already "
            "embedded).",
            "",
            *latency_table(lat),
        ]
    return out
