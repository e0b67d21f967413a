"""A multi-session conversation set of our own, generated deterministically (no file to download).

    from lib.convset import build
    convs = build(seed=26)     # list[Conversation]; the same seed gives the same set, byte for byte

Each conversation is one person talking to an assistant over about a dozen sessions (a date each,
days apart), a few hundred turns in all. Most turns are small talk and work chatter; among them the
person states facts about their life (a city, a job, a pet, a sibling, a policy number, a hobby, a
car, an allergy, a partner, a trip), and later **updates** some of them. Filler turns reuse the
same words on purpose (a neighbour's dog, a colleague's move, an article about insurance), so
neither word overlap nor topic alone finds the evidence.

Questions carry the turn ids that answer them (`evidence`) and a kind:

- `single`: one fact, asked in other words than it was stated;
- `update`: the current value of a fact that changed (the evidence is the latest statement);
- `temporal`: the earlier value of a fact that changed, or which came first (both statements);
- `multihop`: needs two turns linked by a name (who gave me X -> where that person lives);
- `identifier`: an exact code stated once, among near-miss codes in other turns.

**The split** (`tuning`, fixed): conversations with an even index are the tuning half, odd ones the
held-out half. Fusion knobs are chosen on the tuning half only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta

CITIES = ["Lisbon", "Porto", "Valencia", "Utrecht", "Ghent", "Tampere", "Bologna", "Krakow", "Leeds", "Graz"]
COMPANIES = [
    "Nordwind Logistics",
    "Brightpath Labs",
    "Kestrel Insurance",
    "Orchard Health",
    "Vantage Foods",
    "Helix Robotics",
]
ROLES = [
    "data analyst",
    "product designer",
    "support lead",
    "backend developer",
    "project manager",
    "QA engineer",
]
SPECIES = [("dog", "puppy"), ("cat", "kitten"), ("rabbit", "bunny"), ("parrot", "bird")]
PET_NAMES = ["Biscuit", "Pepper", "Juniper", "Mochi", "Rufus", "Clementine", "Olive", "Ziggy"]
RELATIONS = ["sister", "brother", "cousin"]
PEOPLE = [
    "Maya",
    "Tomas",
    "Ines",
    "Jonah",
    "Leila",
    "Viktor",
    "Aiko",
    "Rafael",
    "Noor",
    "Elena",
    "Sami",
    "Greta",
]
GIFTS = ["a vintage record player", "a cast-iron pan", "a hand-knitted scarf", "a telescope", "a road bike"]
HOBBIES = ["pottery", "salsa dancing", "rock climbing", "watercolour painting", "Japanese", "chess"]
CARS = [
    ("Skoda Octavia", "dark green"),
    ("Toyota Yaris", "silver"),
    ("Volvo V60", "navy blue"),
    ("Fiat Panda", "red"),
]
ALLERGENS = [
    ("shellfish", "prawns and mussels"),
    ("hazelnuts", "anything with nuts"),
    ("sesame", "tahini and hummus"),
]
PARTNER_JOBS = ["veterinarian", "architect", "primary school teacher", "pilot", "pharmacist"]
TRIPS = ["Iceland", "Sicily", "the Scottish Highlands", "Morocco", "Norway's fjords"]
POLICY_PREFIX = ["KIN", "HLT", "AUT", "HOM"]

SMALL_TALK = [
    "The weather has been so grey this week, I barely left the flat.",
    "I watched a documentary about deep sea creatures last night, pretty wild.",
    "Work has been hectic, three deadlines landed on the same Friday.",
    "I tried a new ramen place near the station, the broth was too salty.",
    "Do you have tips for sleeping better? I keep waking up at 4am.",
    "My neighbour's dog barked all night again, I'm exhausted.",
    "A colleague of mine just moved to another city for a new job.",
    "I read an article about insurance fraud and policy numbers being stolen.",
    "Thinking about repainting the living room, maybe a warm beige.",
    "The train was delayed forty minutes this morning, classic.",
    "I finally finished that fantasy series everyone recommended.",
    "My friend adopted a cat last month and won't stop sending photos.",
    "We had a team offsite, lots of sticky notes and too much coffee.",
    "I'm trying to cut down on sugar, it's harder than I thought.",
    "Someone at the gym told me about a great hiking trail up north.",
    "The supermarket ran out of oat milk, third time this month.",
    "I need to renew my passport before summer, remind me how long that takes?",
    "Our building's lift is broken so it's stairs for a week.",
    "I started a budget spreadsheet, we'll see how long I keep it up.",
    "Saw an ad for car insurance that promised half price, sounds like a scam.",
    "My manager wants a presentation on quarterly numbers by Monday.",
    "I keep meaning to call my grandmother, she loves a long chat.",
    "There was a street market downtown with amazing cheese.",
    "Can you suggest a podcast about history? Something light.",
    "I dropped my phone and the screen cracked, annoying.",
    "The heating bill this winter was brutal.",
    "We're thinking of getting a bigger table for dinner parties.",
    "My cousin's wedding photos finally arrived, they look great.",
    "I went to a pottery exhibition but didn't buy anything.",
    "A friend is selling her old car, but I don't really need one.",
]
ASSISTANT = [
    "That sounds tiring. Want me to suggest a few ways to make it easier?",
    "Good to hear from you. How did that make you feel?",
    "Noted. Is there anything you'd like me to help you plan around it?",
    "Interesting! Tell me more if you like.",
    "I can help with that. Would a short checklist be useful?",
    "That makes sense. Let me know how it goes.",
    "Thanks for sharing. Anything else on your mind today?",
    "Sounds like a busy week. Shall we break it into smaller steps?",
]


@dataclass(frozen=True)
class Turn:
    id: str
    session: int
    date: date
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def tuning(self) -> bool:
        return int(self.id.rsplit("-", 1)[1]) % 2 == 0


def build(
    seed: int = 26, conversations: int = 6, sessions: int = 12, turns_per_session: int = 24
) -> list[Conversation]:
    """The whole set: `conversations` people, each `sessions` sessions of `turns_per_session` turns."""
    return [
        _conversation(random.Random(seed * 1000 + i), i, sessions, turns_per_session)
        for i in range(conversations)
    ]


def _conversation(rng: random.Random, index: int, sessions: int, per_session: int) -> Conversation:
    conv = Conversation(f"conv-{index}")
    city, city2 = rng.sample(CITIES, 2)
    (company, company2), (role, role2) = rng.sample(COMPANIES, 2), rng.sample(ROLES, 2)
    species, young = rng.choice(SPECIES)
    pet = rng.choice(PET_NAMES)
    rel = rng.choice(RELATIONS)
    sib, partner = rng.sample(PEOPLE, 2)
    sib_city = rng.choice([c for c in CITIES if c not in (city, city2)])
    gift = rng.choice(GIFTS)
    hobby, hobby2 = rng.sample(HOBBIES, 2)
    car, colour = rng.choice(CARS)
    allergen, foods = rng.choice(ALLERGENS)
    pjob = rng.choice(PARTNER_JOBS)
    trip = rng.choice(TRIPS)
    prefix = rng.choice(POLICY_PREFIX)
    digits = rng.randrange(10_000, 99_999)
    policy = f"{prefix}-{digits}"
    twins = [f"{prefix}-{digits + d}" for d in (9, -90)]  # near misses, said elsewhere
    # (session, slot, text): facts spread over the sessions, updates in later ones
    events: list[tuple[int, str, str]] = [
        (0, "city", f"I've been living in {city} for a few years now, close to the old harbour."),
        (0, "job", f"For context, I work as a {role} at {company}."),
        (1, "pet", f"We adopted a {species} from the shelter and named it {pet}, such a sweet {young}."),
        (1, "sib_city", f"My {rel} {sib} lives in {sib_city}, we talk every Sunday."),
        (2, "policy", f"My home insurance policy number is {policy}, writing it here so I don't lose it."),
        (2, "hobby", f"I've started taking {hobby} lessons on Thursday evenings."),
        (3, "car", f"I bought a used {car}, {colour}, it's in decent shape."),
        (3, "gift", f"{sib} sent me {gift} for my birthday, so thoughtful."),
        (4, "allergy", f"Turns out I'm allergic to {allergen}; the doctor said no more {foods}."),
        (4, "partner", f"My partner {partner} works as a {pjob}, long shifts lately."),
        (5, "trip", f"{partner} and I are planning a trip to {trip} in the autumn."),
        (6, "job2", f"I accepted the offer from {company2}! I'm starting there as {role2} next month."),
        (7, "hobby2", f"I dropped the {hobby} classes; Thursday nights are for {hobby2} now."),
        (8, "city2", f"Big news: we finally relocated, we've been settled in {city2} since last week."),
        (9, "car2", f"I sold the {car}, I cycle to work on an e-bike these days."),
        (10, "twin", f"The claim form asked for reference {twins[0]}, which confused me, that's not mine."),
        (11, "twin2", f"Spam email today quoting a policy {twins[1]}, deleted it."),
    ]
    start = date(2025, 1, 6) + timedelta(days=rng.randrange(0, 60))
    where: dict[str, str] = {}
    day = start
    n = 0
    for s in range(sessions):
        day += timedelta(days=rng.randrange(3, 11))
        todays = [(slot, text) for (sess, slot, text) in events if sess == s]
        positions = sorted(rng.sample(range(0, per_session, 2), len(todays)))
        fact_at = dict(zip(positions, todays, strict=True))
        for t in range(per_session):
            tid = f"{conv.id}-t{n:04d}"
            if t % 2 == 0:
                if t in fact_at:
                    slot, text = fact_at[t]
                    where[slot] = tid
                else:
                    text = rng.choice(SMALL_TALK)
                conv.turns.append(Turn(tid, s, day, "user", text))
            else:
                conv.turns.append(Turn(tid, s, day, "assistant", rng.choice(ASSISTANT)))
            n += 1
    q: list[tuple[str, str, tuple[str, ...]]] = [
        ("single", f"What's the name of my {young}?", ("pet",)),
        ("single", "Which foods did my doctor tell me to stay away from?", ("allergy",)),
        ("single", f"What does {partner} do for a living?", ("partner",)),
        ("single", f"Which town is my {rel} based in?", ("sib_city",)),
        ("update", "Which city am I living in at the moment?", ("city2",)),
        ("update", "Who is my current employer?", ("job2",)),
        ("update", "What do I do on Thursday nights these days?", ("hobby2",)),
        ("update", "How do I get to work now?", ("car2",)),
        ("temporal", "Where did I live before I moved?", ("city", "city2")),
        ("temporal", "What was my job title before I switched companies?", ("job", "job2")),
        ("temporal", "What colour was the car I sold?", ("car", "car2")),
        ("temporal", "Which class did I quit, and what replaced it?", ("hobby", "hobby2")),
        ("multihop", f"In which city does the person who gave me {gift} live?", ("gift", "sib_city")),
        (
            "multihop",
            f"What is the profession of the person I'm travelling to {trip} with?",
            ("trip", "partner"),
        ),
        ("identifier", "What is my home insurance policy number?", ("policy",)),
        ("identifier", f"Is {policy} my policy or somebody else's?", ("policy",)),
    ]
    for i, (kind, text, slots) in enumerate(q):
        conv.questions.append(Question(f"{conv.id}-q{i:02d}", kind, text, tuple(where[s] for s in slots)))
    return conv


if __name__ == "__main__":  # a look at the set
    for c in build():
        print(
            c.id, "tuning" if c.tuning else "held-out", len(c.turns), "turns", len(c.questions), "questions"
        )
    c0 = build()[0]
    for question in c0.questions[:4]:
        print(question.kind, question.text, [t.text for t in c0.turns if t.id in question.evidence])
