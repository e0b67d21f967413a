"""Paraphrased questions over facts with near-identical distractors (issue 39 item 5), written by
hand before any ranking ran on them: 24 pairs of facts that differ in one detail (who, which
thing, which day), and one question per fact asked in other words, naming the detail that tells
the pair apart but few of the fact's other words. The kind of set where a floor that looks at the
best match alone cuts answers: the answer's words are not the question's.

`FACTS` are (id, text); `QUESTIONS` are (question, id of the fact that answers it). **The split**:
the question about the first fact of each pair is in the tuning half, the one about the second in
the held-out half (`split`).
"""

from __future__ import annotations

PAIRS: list[tuple[tuple[str, str, str], tuple[str, str, str]]] = [
    (
        (
            "coffee-maria",
            "Maria takes her coffee with oat milk and no sugar.",
            "What does Maria want in her morning cup?",
        ),
        (
            "coffee-marta",
            "Marta takes her tea with oat milk and no sugar.",
            "How should I make Marta's hot drink?",
        ),
    ),
    (
        ("gym-ben", "Ben trains at the climbing gym on Monday evenings.", "When is Ben bouldering?"),
        (
            "gym-bea",
            "Bea trains at the climbing gym on Wednesday evenings.",
            "Which night does Bea go climbing?",
        ),
    ),
    (
        (
            "vet-cat",
            "The cat's vaccination is due at the vet in April.",
            "When does our kitty need her jabs?",
        ),
        (
            "vet-dog",
            "The dog's vaccination is due at the vet in October.",
            "Which month is the puppy's booster shot?",
        ),
    ),
    (
        (
            "flight-out",
            "The outbound flight to Oslo leaves at 06:50 from terminal 2.",
            "What time is the early plane to Norway?",
        ),
        (
            "flight-back",
            "The return flight from Oslo lands at 22:15 in terminal 1.",
            "When do we get home from Norway?",
        ),
    ),
    (
        (
            "allergy-tom",
            "Tom cannot eat peanuts; he carries an epinephrine pen.",
            "What is Tom's food allergy?",
        ),
        (
            "allergy-tim",
            "Tim cannot eat shellfish; he gets hives from prawns.",
            "Which seafood makes Tim ill?",
        ),
    ),
    (
        (
            "rent-flat",
            "Rent for the flat is paid on the 1st by standing order.",
            "When does the apartment payment go out?",
        ),
        (
            "rent-garage",
            "Rent for the garage is paid on the 15th by card.",
            "When do I pay for the parking space?",
        ),
    ),
    (
        ("school-zoe", "Zoe's school day ends at 3:15 on weekdays.", "What time should I pick up Zoe?"),
        (
            "school-leo",
            "Leo's nursery day ends at 12:30 on weekdays.",
            "When must Leo be collected from daycare?",
        ),
    ),
    (
        (
            "car-service",
            "The Volvo is booked for a service at Hendricks garage on the 9th.",
            "When is the estate car going in for maintenance?",
        ),
        (
            "car-tyres",
            "The Fiat is booked for new tyres at Hendricks garage on the 19th.",
            "When does the small car get its wheels changed?",
        ),
    ),
    (
        (
            "wifi-home",
            "The home wifi is called Larkspur and its password is on the fridge.",
            "Where can I find the network key at the house?",
        ),
        (
            "wifi-office",
            "The office wifi is called Larkspur-Guest and its password changes weekly.",
            "How often is the work network's code rotated?",
        ),
    ),
    (
        (
            "doctor-ana",
            "Ana sees Dr. Patel about her asthma every three months.",
            "Who treats Ana's breathing problems?",
        ),
        (
            "doctor-ava",
            "Ava sees Dr. Petel about her migraines every six months.",
            "Which physician handles Ava's headaches?",
        ),
    ),
    (
        (
            "plant-fern",
            "The fern in the bathroom needs water twice a week.",
            "How often should the leafy plant by the shower be watered?",
        ),
        (
            "plant-cactus",
            "The cactus in the bedroom needs water once a month.",
            "How rarely does the spiky plant need a drink?",
        ),
    ),
    (
        (
            "bins-general",
            "General waste bins go out on Tuesday night.",
            "Which evening do I put the rubbish out?",
        ),
        (
            "bins-recycling",
            "Recycling bins go out on Thursday night.",
            "When is the paper and plastic collection?",
        ),
    ),
    (
        (
            "key-neighbour",
            "The spare house key is with the neighbour at number 12.",
            "Who can let me in if I'm locked out?",
        ),
        (
            "key-office",
            "The spare office key is with the receptionist, Carla.",
            "Who holds the backup for the workplace door?",
        ),
    ),
    (
        (
            "bday-mum",
            "Mum's birthday is on the 4th of May; she likes tulips.",
            "What flowers should I get my mother, and when?",
        ),
        (
            "bday-dad",
            "Dad's birthday is on the 14th of May; he likes whisky.",
            "What present suits my father's birthday?",
        ),
    ),
    (
        (
            "pay-salary",
            "Salary arrives on the 25th, or the Friday before if it falls on a weekend.",
            "When do I get paid?",
        ),
        (
            "pay-bonus",
            "The yearly bonus arrives with the March payslip.",
            "Which month brings the annual extra money?",
        ),
    ),
    (
        (
            "lang-nina",
            "Nina is learning Japanese for a trip to Kyoto in spring.",
            "Why is Nina studying an Asian language?",
        ),
        (
            "lang-nora",
            "Nora is learning Korean for a job in Seoul next year.",
            "What is Nora's reason for her language course?",
        ),
    ),
    (
        (
            "meet-standup",
            "The team standup is at 9:15 in the small kitchen.",
            "Where do we have the morning sync?",
        ),
        (
            "meet-retro",
            "The team retro is at 16:00 every other Friday in room Atlas.",
            "When do we look back on the sprint?",
        ),
    ),
    (
        (
            "sub-music",
            "The music streaming subscription renews on the 3rd for 10.99.",
            "How much is the songs app each month?",
        ),
        (
            "sub-video",
            "The video streaming subscription renews on the 30th for 13.99.",
            "What do films and series cost me monthly?",
        ),
    ),
    (
        (
            "insur-home",
            "Home insurance is with Lakeside Mutual, renewal in August.",
            "Which company covers the house?",
        ),
        (
            "insur-car",
            "Car insurance is with Lakeshore Direct, renewal in January.",
            "Who insures the vehicle?",
        ),
    ),
    (
        ("pass-me", "My passport expires in June 2027.", "Until when is my travel document valid?"),
        ("pass-sam", "Sam's passport expires in June 2025.", "When does Sam need a new travel document?"),
    ),
    (
        ("diet-lea", "Lea is vegetarian but eats eggs and cheese.", "Can I serve Lea an omelette?"),
        ("diet-lia", "Lia is vegan and avoids honey too.", "Which sweetener should I leave out for Lia?"),
    ),
    (
        ("park-work", "At work I park on level 3 of the garage, spot 312.", "Where is my car at the office?"),
        (
            "park-mall",
            "At the mall I park on level 2, near the lift, spot 212.",
            "Where did I leave the car when shopping?",
        ),
    ),
    (
        (
            "oncall-dan",
            "Daniel carries the pager for the storage cluster this week.",
            "Who gets woken up if the disks fail?",
        ),
        (
            "oncall-dana",
            "Dana carries the pager for the network this week.",
            "Who is on call for routers and switches?",
        ),
    ),
    (
        (
            "recipe-lasagne",
            "The lasagne needs 45 minutes in the oven at 180 degrees.",
            "How long does the pasta bake cook?",
        ),
        (
            "recipe-bread",
            "The sourdough needs 35 minutes in the oven at 230 degrees.",
            "How hot should the oven be for the loaf?",
        ),
    ),
]

FACTS: list[tuple[str, str]] = [(fid, text) for pair in PAIRS for fid, text, _ in pair]
QUESTIONS: list[tuple[str, str]] = [(q, fid) for pair in PAIRS for fid, _, q in pair]
HALVES = ("tuning", "held-out")


def split(half: str) -> list[tuple[str, str]]:
    """(question, answering fact id) of one half: the first fact of each pair is asked in the
    tuning half, the second in the held-out half."""
    at = HALVES.index(half)
    return [(pair[at][2], pair[at][0]) for pair in PAIRS]
