"""The words of `longconv.py`'s conversations: facts that change, what is said around them, and the
questions asked about them. Written by hand for issue 39 item 6, before any ranking ran on them.

Each `Fact` is one thing about the speaker that changes over time (where they live, who they work
for, ...): a pool of values, how its first value is said (`intro`), how a change is said (`change`:
`{v}` the new value, `{old}` the one it replaces), lines that name a value of the same kind about
*someone else* or as a plan not taken (`other`: the near-identical distractors), an assistant reply
on the topic that names no value (`reply`), and the questions: the current value (`now`), the value
before the latest (`before`) and when the latest change happened (`when`). Questions are asked in
other words than the statements; a `{v}` in a question is the value asked about.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib import convset


@dataclass(frozen=True)
class Fact:
    slot: str
    values: tuple[str, ...]
    intro: tuple[str, ...]
    change: tuple[str, ...]
    other: tuple[str, ...]
    reply: tuple[str, ...]
    now: tuple[str, ...]
    before: tuple[str, ...]
    when: tuple[str, ...]


CITIES = (
    "Lisbon", "Porto", "Valencia", "Utrecht", "Ghent", "Tampere", "Bologna", "Krakow", "Leeds", "Graz",
    "Aarhus", "Bilbao", "Lyon", "Brno", "Cork", "Malmo",
)  # fmt: skip
COMPANIES = (
    "Nordwind Logistics", "Brightpath Labs", "Kestrel Insurance", "Orchard Health", "Vantage Foods",
    "Helix Robotics", "Lumen Analytics", "Tidewater Energy", "Copperleaf Media", "Quarry Software",
)  # fmt: skip
PEOPLE = (
    "Maya", "Tomas", "Ines", "Jonah", "Leila", "Viktor", "Aiko", "Rafael", "Noor", "Elena", "Sami",
    "Greta", "Oskar", "Priya", "Dario", "Hana", "Felix", "Zara",
)  # fmt: skip

FACTS: tuple[Fact, ...] = (
    Fact(
        "home",
        CITIES,
        (
            "I've lived in {v} for about three years now, a small flat near the river.",
            "Home for me is {v}, I like how walkable it is.",
            "Being based in {v} means everything is a short tram ride away.",
        ),
        (
            "We finally did it: we moved to {v} last weekend, boxes everywhere.",
            "The relocation is done, {v} is home now and the new flat has a balcony.",
            "Goodbye {old}! We signed the lease and we're living in {v} from this week.",
        ),
        (
            "My colleague {p} just moved to {x} for a new job.",
            "We spent a long weekend in {x}, lovely old town.",
            "Sometimes I daydream about moving to {x}, but not any time soon.",
            "My friend {p} lives in {x} and keeps inviting us over.",
            "Saw a documentary about {x}, the architecture looks stunning.",
        ),
        (
            "Moving is exhausting. How are you settling in?",
            "A new neighbourhood takes time. Found a good bakery yet?",
        ),
        (
            "Which city do I live in these days?",
            "Where is home for me at the moment?",
            "Where am I living now?",
        ),
        ("Where did I live before the last move?", "Which city was I based in before I relocated?"),
        ("When did I move to {v}?", "When did the move to {v} happen?"),
    ),
    Fact(
        "employer",
        COMPANIES,
        (
            "For context, I'm a data analyst at {v}.",
            "I work at {v}, mostly on their internal reporting.",
            "My job at {v} keeps me busy, the team is nice though.",
        ),
        (
            "Last day at {old} today; on Monday I start at {v}.",
            "I signed the contract with {v}, I start there next month.",
            "New job news: I accepted the offer from {v}!",
        ),
        (
            "A recruiter from {x} messaged me on LinkedIn, I ignored it.",
            "My brother got an interview at {x}, fingers crossed for him.",
            "{p} from my team is leaving for {x}.",
            "I read that {x} is laying people off, scary times.",
            "{x} sponsors the football club down the road.",
        ),
        (
            "Changing jobs is a big step. How do you feel about it?",
            "Congratulations on the news! Anything you want to prepare before the first day?",
        ),
        ("Who do I work for now?", "Which company employs me at the moment?", "Where do I work these days?"),
        ("Where did I work before my current job?", "Which company did I leave?"),
        ("When did I start working at {v}?", "When did I join {v}?"),
    ),
    Fact(
        "commute",
        ("take the bus", "cycle on my e-bike", "drive", "walk", "take the train", "ride my scooter"),
        ("Most mornings I {v} to the office.", "To get to work I {v}, takes about half an hour."),
        (
            "I've switched things up: I {v} to work now, much better than before.",
            "I gave up my old routine, these days I {v} to the office.",
        ),
        (
            "My sister likes to {x} to her job, says it clears her head.",
            "{p} tried to {x} to work for a week and gave up.",
            "There was an article saying people who {x} to work are happier.",
        ),
        ("The commute can shape the whole day. Is it working for you?",),
        ("How do I get to work these days?", "What's my commute like now?"),
        ("How did I use to get to the office?", "What was my old way of commuting?"),
        ("When did I change how I get to work?",),
    ),
    Fact(
        "class",
        ("pottery", "salsa dancing", "rock climbing", "watercolour painting", "Japanese", "chess", "boxing"),
        (
            "I signed up for {v} lessons on Tuesday evenings.",
            "Tuesdays are for my {v} class, it's the highlight of my week.",
        ),
        (
            "I quit {old}; Tuesday nights are for {v} now.",
            "Dropped the {old} course, I started {v} instead.",
        ),
        (
            "{p} wants to drag me to a {x} workshop, not my thing.",
            "My cousin is obsessed with {x} lately.",
            "There's a {x} club opening near the station.",
        ),
        ("A weekly class is a good habit. What do you enjoy most about it?",),
        ("What do I do on Tuesday evenings now?", "Which class am I taking at the moment?"),
        ("Which class did I give up?", "What was my Tuesday activity before the current one?"),
        ("When did I start {v}?", "When did I take up {v}?"),
    ),
    Fact(
        "diet",
        ("vegetarian", "vegan", "pescatarian", "on a low-carb diet", "flexitarian"),
        ("Just so you know, I'm {v}, so keep that in mind for recipes.", "I've been {v} for a while now."),
        ("Update on food: I'm {v} since this month.", "I'm not {old} any more; these days I'm {v}."),
        (
            "{p} is {x}, so dinner parties are tricky.",
            "My flatmate went {x} for a month to see how it feels.",
            "Half the office is {x} now, the canteen changed its menu.",
        ),
        ("Food habits change. Want some recipe ideas that fit?",),
        ("What is my diet like these days?", "How am I eating at the moment?"),
        ("How did I eat before I changed my diet?", "What was my diet previously?"),
        ("When did I change my diet?",),
    ),
    Fact(
        "car",
        ("Skoda Octavia", "Toyota Yaris", "Volvo V60", "Fiat Panda", "Kia Niro", "Renault Clio", "Mazda 3"),
        (
            "I drive a second-hand {v}, it's reliable enough.",
            "My {v} needs a service soon, it's making noises.",
        ),
        ("I sold the {old} and bought a {v}.", "Picked up the {v} today, the {old} is gone."),
        (
            "{p} is selling a {x}, but I'm not interested.",
            "A {x} was parked across my driveway all morning.",
            "The rental place gave my brother a {x} for the holiday.",
        ),
        ("Cars are a lot of admin. Anything you need to sort out for it?",),
        ("What car do I have now?", "What am I driving these days?"),
        ("Which car did I have before?", "What did I drive before the current car?"),
        ("When did I get the {v}?", "When did I buy the {v}?"),
    ),
    Fact(
        "manager",
        PEOPLE,
        ("My manager is {v}, fair but very busy.", "I report to {v}, we have a one-to-one every Thursday."),
        ("After the reorg {v} is my manager.", "{old} moved teams, so now I report to {v}."),
        (
            "My friend's boss is called {x}, what a coincidence.",
            "{x} from finance keeps sending me spreadsheets.",
            "{p} says {x} is the best manager she ever had.",
        ),
        ("Who you report to matters a lot. How is that going?",),
        ("Who is my boss now?", "Who do I report to at the moment?"),
        ("Who managed me before the reorg?", "Who was my previous manager?"),
        ("When did {v} become my manager?", "When did I start reporting to {v}?"),
    ),
    Fact(
        "rent",
        ("950 euros", "1,020 euros", "1,100 euros", "1,180 euros", "1,250 euros"),
        ("Our rent is {v} a month, which is fine for the area.", "We pay {v} monthly for the flat."),
        ("The landlord raised the rent to {v}, ugh.", "The rent goes from {old} to {v} starting next month."),
        (
            "{p} pays {x} for a room, can you believe it?",
            "A flat in my street was listed at {x}, crazy.",
        ),
        ("Housing costs add up. Do you want to go over the budget together?",),
        ("How much rent do I pay now?", "What does my flat cost me each month at the moment?"),
        ("What was my rent before the increase?", "How much was the flat before the landlord's change?"),
        ("When did my rent go up?",),
    ),
    Fact(
        "race",
        ("a 10k", "a half marathon", "a full marathon", "a trail ultra", "a triathlon"),
        ("I'm training for {v} in the spring.", "My running goal this year is {v}."),
        ("New goal: I signed up for {v}!", "I switched my training plan, I'm preparing for {v} now."),
        (
            "{p} finished {x} last weekend, so impressive.",
            "There's {x} going through the city centre on Sunday, roads closed.",
        ),
        ("Training takes discipline. How are your legs feeling?",),
        ("What race am I training for now?", "What's my current running goal?"),
        ("What was I training for before?", "What was my previous race goal?"),
        ("When did I sign up for {v}?",),
    ),
)

#: facts said once that never change: (slot, statement, question)
STEADY: tuple[tuple[str, str, str], ...] = (
    ("allergy", "Turns out I'm allergic to {a}; the doctor said no more {f}.", "Which foods should I avoid?"),
    ("sibling", "My sister {p} lives in {c}, we talk every Sunday.", "Where is my sister based?"),
    ("pet", "We adopted a {s} from the shelter and named it {n}.", "What's the name of our {s}?"),
    (
        "policy",
        "My home insurance policy number is {i}, noting it here.",
        "What is my insurance policy number?",
    ),
    ("birthday", "My birthday is on the {d}, please remind me to book dinner.", "When is my birthday?"),
)
ALLERGENS = (("shellfish", "prawns or mussels"), ("hazelnuts", "anything with nuts"), ("sesame", "tahini"))
PETS = (("dog", "Biscuit"), ("cat", "Pepper"), ("rabbit", "Juniper"), ("parrot", "Mochi"), ("dog", "Rufus"))
DAYS = ("3rd of March", "17th of June", "22nd of September", "9th of November", "28th of January")

#: small talk: `{p}` a person, `{c}` a city, `{w}` a weekday, `{n}` a number; many share words with
#: the questions on purpose (work, live, move, boss, rent, car, class, diet, race)
FILLER: tuple[str, ...] = (
    "The weather has been so grey this week, I barely left the flat.",
    "Work has been hectic, three deadlines landed on the same {w}.",
    "I tried a new ramen place near the station, the broth was too salty.",
    "Do you have tips for sleeping better? I keep waking up at {n}am.",
    "My neighbour's dog barked all night again, I'm exhausted.",
    "I read an article about insurance fraud and stolen policy numbers.",
    "Thinking about repainting the living room, maybe a warm beige.",
    "The train was delayed {n}0 minutes this morning, classic.",
    "I finally finished that fantasy series everyone recommended.",
    "{p} adopted a cat last month and won't stop sending photos.",
    "We had a team offsite, lots of sticky notes and too much coffee.",
    "I'm trying to cut down on sugar, it's harder than I thought.",
    "Someone at the gym told me about a hiking trail near {c}.",
    "The supermarket ran out of oat milk, third time this month.",
    "I need to renew my passport before summer, how long does that take?",
    "Our building's lift is broken, so it's stairs for a week.",
    "I started a budget spreadsheet, we'll see how long I keep it up.",
    "Saw an ad for car insurance that promised half price, sounds like a scam.",
    "My boss wants a presentation on quarterly numbers by {w}.",
    "I keep meaning to call my grandmother, she loves a long chat.",
    "There was a street market downtown with amazing cheese.",
    "Can you suggest a podcast about history? Something light.",
    "I dropped my phone and the screen cracked, annoying.",
    "The heating bill this winter was brutal.",
    "We're thinking of getting a bigger table for dinner parties.",
    "My cousin's wedding photos finally arrived, they look great.",
    "{p} and I watched a film about a heist, the ending made no sense.",
    "I spent the whole {w} cleaning out the cupboards.",
    "Our team lunch is moving to {w} because of the new schedule.",
    "The gym was packed today, I waited ages for a bench.",
    "I've been drinking too much coffee, {n} cups yesterday.",
    "The plants on the balcony finally have flowers.",
    "A parcel went missing, the courier swears it was delivered.",
    "I'm reading a book about habits, the chapter on mornings is good.",
    "My laptop fan sounds like a jet engine during video calls.",
    "I had a long chat with {p} about where we want to live in ten years.",
    "The class reunion invitation arrived, not sure I'll go.",
    "I cooked a big pot of soup for the week, {n} portions in the freezer.",
    "{p} asked whether I'd ever move abroad, I said maybe.",
    "The office coffee machine is broken again.",
    "I got a parking ticket outside the pharmacy, only stopped for five minutes.",
    "We binge-watched a baking show all {w} evening.",
    "I should really back up my photos, the cloud storage is full.",
    "My running shoes are falling apart, time for a new pair.",
    "The landlord finally fixed the leaking tap.",
    "There's a concert in {c} next month, tickets sold out in minutes.",
    "I'm learning to make bread, my first loaf was a brick.",
    "{p} recommended a dentist, I should book a check-up.",
    "We played board games until {n} in the morning.",
    "The meeting about the new project ran an hour over.",
    "I bought a plant for my desk at work, it's already wilting.",
    "Traffic on the ring road was terrible on {w}.",
    "My bike got a flat tyre on the way to the shops.",
    "I started journaling again, just a few lines a day.",
    "The news this morning was so depressing, I turned it off.",
    "I found an old diary from school, so embarrassing.",
    "Our internet went down for a whole afternoon.",
    "I want to learn to swim properly this year.",
    "The kids next door are learning the trumpet.",
    "I tried meditation for {n} minutes, my mind kept wandering.",
)
ASSISTANT: tuple[str, ...] = (
    *convset.ASSISTANT,
    "Oh no, that's annoying. Is there anything I can do?",
    "Nice! Small wins count.",
    "Fair enough. Want a reminder for it?",
    "I hear you. Some weeks are like that.",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

#: questions about things no conversation ever states, asked of every conversation: half general
#: knowledge, half about the speaker's life (never said). Two halves of different texts: the
#: floor is chosen on `UNRELATED_TUNING` and reported on `UNRELATED_HELD_OUT`.
UNRELATED_TUNING: tuple[str, ...] = (
    "How many moons does Jupiter have?",
    "What is the capital of Peru?",
    "Who won the 1998 football world cup?",
    "What is the boiling point of ethanol?",
    "How do I remove red wine stains from a carpet?",
    "recipe for a vegan lasagne",
    "quantum chromodynamics lecture notes",
    "What is the speed of sound in water?",
    "Who painted the Sistine Chapel ceiling?",
    "How tall is Mount Kilimanjaro?",
    "What's my blood type?",
    "What is my shoe size?",
    "Which primary school did I go to?",
    "What is my favourite colour?",
    "Do I play a musical instrument?",
    "What's the name of my first teacher?",
    "How long should sourdough proof overnight?",
    "When does the swimming pool open?",
    "Which train goes to the airport?",
    "What's the code for my bike lock?",
)
UNRELATED_HELD_OUT: tuple[str, ...] = (
    "How many planets are in the solar system?",
    "What is the capital of Australia?",
    "Who wrote One Hundred Years of Solitude?",
    "What is the melting point of iron?",
    "How do I get chewing gum out of hair?",
    "best way to cook risotto",
    "introduction to string theory",
    "How far is the Moon from the Earth?",
    "Who composed the Four Seasons?",
    "How deep is the Mariana Trench?",
    "What is my passport number?",
    "How tall am I?",
    "Which university did I study at?",
    "What is my favourite film?",
    "Do I speak any Portuguese?",
    "What was the name of my childhood best friend?",
    "How long do you boil an egg for a runny yolk?",
    "When does the library close on Saturdays?",
    "Which bus goes to the stadium?",
    "What's the PIN for my bank card?",
)
