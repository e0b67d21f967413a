"""A harder conversation set (issue 39 item 6): long conversations in which facts change.

    from lib.longconv import load, build
    convs = load()          # the committed data, benchmarks/data/longconv.json
    convs = build(seed=39)  # the same, generated (deterministic: a seed, no download, no LLM)
    python benchmarks/lib/longconv.py --write   # regenerate the data file; --check: data == build()

Eight people each talk to an assistant over 24 dated sessions (3 to 12 days apart, about eight
months), 16 to 24 turns a session: about 480 turns each, 3,800 in all. Most turns are small talk
(`longconv_text.FILLER`, formatted with names, cities and weekdays, so few repeat verbatim). Among
them each person states seven facts of their life that **change** (`longconv_text.FACTS`: where
they live, who they work for, how they commute, ...), two or three values each, in different
sessions and in varied words; five that never change; and, for each changing fact, three to five
lines naming a value of the same kind about someone else or as a plan not taken (the near-identical
distractors: "My colleague Sami just moved to Ghent for a new job.").

Questions carry the turns that answer them (`evidence`) and a kind:

- `now`: the current value ("Which city do I live in these days?"); the evidence is the latest
  statement, and `stale` lists the earlier ones (a ranking that puts one of them first answers
  with an outdated value: `update accuracy`);
- `before`: the value before the latest ("Where did I live before the last move?"); the evidence is
  that value's statement and the change that replaced it;
- `when`: when the latest change happened ("When did I move to Ghent?"); the evidence is the
  change (its session's date answers);
- `steady`: a fact said once (an allergy, a sister's city, an insurance number).

**The split**: conversations with an even index are the tuning half, odd ones the held-out half.
`UNRELATED_TUNING` / `UNRELATED_HELD_OUT` (different texts) are questions about things never said.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.longconv_text import (
    ALLERGENS,
    ASSISTANT,
    CITIES,
    DAYS,
    FACTS,
    FILLER,
    PEOPLE,
    PETS,
    STEADY,
    UNRELATED_HELD_OUT,
    UNRELATED_TUNING,
    WEEKDAYS,
    Fact,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "longconv.jsonl"
SEED = 39
__all__ = [
    "DATA",
    "UNRELATED_HELD_OUT",
    "UNRELATED_TUNING",
    "Conversation",
    "Question",
    "Turn",
    "build",
    "load",
]


@dataclass(frozen=True)
class Turn:
    id: str
    session: int
    date: str  # ISO date of the session
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]
    #: earlier statements of the same fact (`now` questions): ranked above the evidence, they
    #: answer with an outdated value
    stale: tuple[str, ...] = ()


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def tuning(self) -> bool:
        return int(self.id.rsplit("-", 1)[1]) % 2 == 0


def build(
    seed: int = SEED, conversations: int = 8, sessions: int = 24, changing: int = 7
) -> list[Conversation]:
    """The whole set, generated: `conversations` people, `sessions` sessions each."""
    return [
        _conversation(random.Random(seed * 1000 + i), i, sessions, changing) for i in range(conversations)
    ]


def load(path: Path = DATA) -> list[Conversation]:
    """The committed set (what the benchmarks read)."""
    convs: dict[str, Conversation] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        conv = convs.setdefault(row["conversation"], Conversation(row["conversation"]))
        if "turn" in row:
            conv.turns.append(Turn(**row["turn"]))
        else:
            q = row["question"]
            conv.questions.append(
                Question(q["id"], q["kind"], q["text"], tuple(q["evidence"]), tuple(q["stale"]))
            )
    return list(convs.values())


def dump(convs: list[Conversation]) -> str:
    """The set as JSON lines: each turn, then each question, of each conversation."""
    rows = [{"conversation": c.id, "turn": asdict(t)} for c in convs for t in c.turns]
    rows += [{"conversation": c.id, "question": asdict(q)} for c in convs for q in c.questions]
    rows.sort(key=lambda r: str(r["conversation"]))  # stable: a conversation's turns, then its questions
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


# -- generation -----------------------------------------------------------------------------------


@dataclass
class _Event:
    """A user turn to place in a session: its text, the assistant's reply, and a label to find it."""

    session: int
    text: str
    reply: str | None = None
    label: str | None = None


def _chain(rng: random.Random, fact: Fact, sessions: int) -> tuple[list[str], list[int]]:
    """The values a fact takes and the session each is said in (the first early, changes later)."""
    n = 3 if rng.random() < 0.4 else 2
    values = rng.sample(fact.values, n)
    at = [rng.randrange(0, 6)]
    for k in range(1, n):
        last = sessions - 1 - 4 * (n - 1 - k)
        at.append(rng.randrange(min(at[-1] + 4, last), last + 1))
    return values, at


def _fill(rng: random.Random, text: str) -> str:
    return text.format(
        p=rng.choice(PEOPLE), c=rng.choice(CITIES), w=rng.choice(WEEKDAYS), n=rng.randrange(2, 9)
    )


def _conversation(rng: random.Random, index: int, sessions: int, changing: int) -> Conversation:
    conv = Conversation(f"long-{index}")
    events: list[_Event] = []
    asks: list[tuple[str, str, list[str], list[str]]] = []  # kind, text, evidence labels, stale labels
    for fact in rng.sample(FACTS, changing):
        values, at = _chain(rng, fact, sessions)
        labels = [f"{fact.slot}{k}" for k in range(len(values))]
        for k, (v, s) in enumerate(zip(values, at, strict=True)):
            said = rng.choice(fact.intro if k == 0 else fact.change).format(
                v=v, old=values[k - 1] if k else ""
            )
            events.append(_Event(s, said, rng.choice(fact.reply), labels[k]))
        for _ in range(rng.randrange(3, 6)):
            x = rng.choice([v for v in fact.values if v != values[-1]])
            other = rng.choice(fact.other).format(x=x, p=rng.choice(PEOPLE))
            events.append(_Event(rng.randrange(0, sessions), other))
        latest = values[-1]
        asks.append(("now", rng.choice(fact.now), [labels[-1]], labels[:-1]))
        asks.append(("before", rng.choice(fact.before), [labels[-2], labels[-1]], []))
        asks.append(("when", rng.choice(fact.when).format(v=latest), [labels[-1]], []))
    events += _steady(rng, sessions, asks)
    where = _lay_out(rng, conv, events, sessions)
    for i, (kind, text, ev, stale) in enumerate(asks):
        conv.questions.append(
            Question(
                f"{conv.id}-q{i:02d}", kind, text, tuple(where[e] for e in ev), tuple(where[s] for s in stale)
            )
        )
    return conv


def _steady(
    rng: random.Random, sessions: int, asks: list[tuple[str, str, list[str], list[str]]]
) -> list[_Event]:
    allergen, foods = rng.choice(ALLERGENS)
    species, pet = rng.choice(PETS)
    prefix, digits = rng.choice(["KIN", "HLT", "AUT", "HOM"]), rng.randrange(10_000, 99_999)
    values = {
        "a": allergen,
        "f": foods,
        "p": rng.choice(PEOPLE),
        "c": rng.choice(CITIES),
        "s": species,
        "n": pet,
        "i": f"{prefix}-{digits}",
        "d": rng.choice(DAYS),
    }
    out = []
    for slot, said, question in STEADY:
        out.append(_Event(rng.randrange(0, sessions), said.format(**values), rng.choice(ASSISTANT), slot))
        asks.append(("steady", question.format(**values), [slot], []))
    for d in (9, -90):  # near-miss numbers, said elsewhere
        twin = f"{prefix}-{digits + d}"
        out.append(_Event(rng.randrange(0, sessions), f"A form asked for reference {twin}, that's not mine."))
    return out


def _lay_out(rng: random.Random, conv: Conversation, events: list[_Event], sessions: int) -> dict[str, str]:
    """Sessions of 16-24 turns: user turns (events at random places, filler elsewhere), each
    followed by the assistant's reply. Returns each labelled event's turn id."""
    day = date(2024, 1, 8) + timedelta(days=rng.randrange(0, 60))
    labels: dict[str, str] = {}
    n = 0
    for s in range(sessions):
        day += timedelta(days=rng.randrange(3, 13))
        todays = [e for e in events if e.session == s]
        pairs = max(rng.randrange(8, 13), len(todays))
        slots = sorted(rng.sample(range(pairs), len(todays)))
        placed = dict(zip(slots, todays, strict=True))
        for p in range(pairs):
            e = placed.get(p)
            user = e.text if e else _fill(rng, rng.choice(FILLER))
            reply = (e.reply if e and e.reply else None) or rng.choice(ASSISTANT)
            for speaker, text in (("user", user), ("assistant", reply)):
                tid = f"{conv.id}-t{n:04d}"
                conv.turns.append(Turn(tid, s, day.isoformat(), speaker, text))
                if speaker == "user" and e is not None and e.label is not None:
                    labels[e.label] = tid
                n += 1
    return labels


if __name__ == "__main__":
    built = dump(build())
    if "--write" in sys.argv:
        DATA.parent.mkdir(exist_ok=True)
        DATA.write_text(built, encoding="utf-8")
    elif "--check" in sys.argv:
        sys.exit(0 if DATA.read_text(encoding="utf-8") == built else "the data differs from build(): --write")
    for c in load() if DATA.exists() else build():
        kinds: dict[str, int] = {}
        for q in c.questions:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
        span = f"{c.turns[0].date}..{c.turns[-1].date}"
        half = "tuning" if c.tuning else "held-out"
        print(c.id, half, len(c.turns), "turns", len({t.session for t in c.turns}), "sessions", span, kinds)
