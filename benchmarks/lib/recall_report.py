"""The recall benchmark's tables: quality, fusion tuning and latency (nothing here times anything).

Split from benchmarks/recall.py so the measuring script stays short.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.memory_report import Stats, both
from lib.recall_set import FACTS, HALVES, QUESTIONS, split

METHODS = ("text", "vector", "fused")
KINDS = ("paraphrase", "identifier", "all")
DEPTH = 50
LIMIT = 5


@dataclass(frozen=True)
class Tuned:
    """One fusion variant's hits (@1, @3) on the combined set and on each half."""

    label: str
    all: tuple[int, int]
    tuning: tuple[int, int]
    held: tuple[int, int]
    para1: int
    id1: int
    default: bool


@dataclass
class Run:
    quality: dict[int, dict[str, dict[str, tuple[int, int, int]]]]  # distractors -> method -> kind/half
    tuning: list[Tuned]
    tuning_1k: list[Tuned]
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
    out += [
        "",
        "| method | tuning half @1 | tuning half @3 | held-out half @1 | held-out half @3 |",
        "|---|---:|---:|---:|---:|",
    ]
    for method in METHODS:
        cells = [pct(q[method][h][i], q[method][h][2]) for h in HALVES for i in (0, 1)]
        out.append(f"| {names[method]} | " + " | ".join(cells) + " |")
    return out


def tuning_table(rows: list[Tuned], n: int) -> list[str]:
    """The baselines, the default, its one-knob neighbours and the best of the grid on the tuning
    half (the held-out half is only shown, never used to pick)."""
    default = next(r for r in rows if r.default)
    dk = default.label.split(", ")

    def near(label: str) -> bool:
        parts = label.split(", ")
        return len(parts) == 4 and sum(a != b for a, b in zip(parts, dk, strict=True)) == 1

    grid = [r for r in rows if r.label.startswith("k=")]
    best = max(grid, key=lambda r: (r.tuning[0] + r.tuning[1], r.tuning[0]))
    keep = rows[:4] + [default] + [r for r in grid if near(r.label)] + ([best] if best is not default else [])
    nt, nh = len(split("tuning")), len(split("held-out"))
    out = [
        "| fusion | combined @1 | combined @3 | tuning @1 | tuning @3 | held-out @1 | held-out @3 "
        "| paraphrase @1 | identifier @1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in keep:
        tag = (
            " **(default)**" if r.default else (" (best of the grid on the tuning half)" if r is best else "")
        )
        out.append(
            f"| {r.label}{tag} | {r.all[0]}/{n} | {r.all[1]}/{n} | {r.tuning[0]}/{nt} | {r.tuning[1]}/{nt} "
            f"| {r.held[0]}/{nh} | {r.held[1]}/{nh} | {r.para1} | {r.id1} |"
        )
    text, vector = rows[0], rows[1]
    beats = sum(
        r.all[0] > max(text.all[0], vector.all[0]) and r.all[1] >= max(text.all[1], vector.all[1])
        for r in grid
    )
    out += [
        "",
        f"{beats} of the {len(grid)} grid points beat both single methods at @1 and match or beat them "
        "at @3 on the combined set.",
    ]
    return out


def verdict(q: dict[str, dict[str, tuple[int, int, int]]], where: str) -> str:
    """Whether fused beats each single method at @1 and at @3, on the combined set and held out."""
    parts = []
    for part, name in (("all", "combined set"), ("held-out", "held-out half")):
        best = [max(q["text"][part][i], q["vector"][part][i]) for i in (0, 1)]
        fused = q["fused"][part]
        wins = all(fused[i] > best[i] for i in (0, 1))
        parts.append(
            f"on the {name} fused {'beats' if wins else 'does NOT beat'} each single method at @1 "
            f"({fused[0]} vs {best[0]} of {fused[2]}) and @3 ({fused[1]} vs {best[1]})"
        )
    return f"{where}: " + "; ".join(parts) + "."


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
        "an exact identifier that has a near-miss twin among the facts), split once into a tuning half "
        f"({len(split('tuning'))}) and a held-out half ({len(split('held-out'))}), alternate questions of "
        "each kind (benchmarks/lib/recall_set.py); `recall(limit=3)` through `LongTermMemory`.",
        "",
        f"On the {len(FACTS)} facts alone:",
        "",
        *quality_table(r.quality[0]),
        "",
        verdict(r.quality[0], f"On the {len(FACTS)} facts alone"),
    ]
    if 1_000 in r.quality:
        out += [
            "",
            f"Among 1,000 memories ({len(FACTS)} facts, {1_000 - len(FACTS)} generated distractors):",
            "",
        ]
        out += quality_table(r.quality[1_000])
        out += ["", verdict(r.quality[1_000], "Among 1,000 memories")]
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
