"""Query terms for the exact-term ranking: words, lower-cased, without English stop words.

MongoDB's "english" text index drops stop words itself; the embedded engine's does not, so a
question like "what is the dog's medicine?" matched every memory holding "the" or "is".
Searching for the remaining terms only behaves the same on both, and rebuilding the search
string from words keeps `$text`'s own syntax (quoted phrases, `-negation`) out of a user's
query: "ORD-58213" is the two terms "ord" and "58213", never "ord, but not 58213".

`identifiers` and `holds` serve the fusion (`rank.fuse_recall`): a query token that holds a
digit ("ORD-58213", "v2.14.3", "192.168.1.1", "4821") names one thing, and a memory holds it
only if it holds the whole token as typed: "192.168.1.11" does not hold "192.168.1.1", though
both hold the same `$text` terms.
"""

from __future__ import annotations

import re

from mongogate.textrank import STOP_WORDS  # one list for $text and the in-process index

__all__ = ["STOP_WORDS", "coverage", "holds", "identifiers", "terms", "text_search"]

#: the most terms a `$text` search is given (the longest queries are cut, not refused)
MAX_TERMS = 32

# a word: letters/digits, with inner apostrophes ("don't", "Ahmed's") kept for the stop list
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_POSSESSIVE = re.compile(r"'s$")
#: punctuation around a token that is not part of it ("ORD-58213?", "(TP1345)", "#4821", "1.1.")
_AROUND = "?!,;:\"'()[]{}<>#*`."
#: the most identifiers taken from one query
MAX_IDENTIFIERS = 8
#: characters that join the parts of an identifier ("db-rpt-07", "v2.14.3", "a/b", "10:40")
_JOINERS = ".-/:_"


def terms(text: str) -> list[str]:
    """The distinct search terms of `text`, in order: words, lower-cased, stop words dropped."""
    out: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(text.lower()):
        word = match.group(0)
        if word in STOP_WORDS:
            continue
        word = _POSSESSIVE.sub("", word)
        for part in word.split("'"):  # the engine's tokenizer splits on the apostrophe too
            if part and part not in STOP_WORDS and part not in seen:
                seen.add(part)
                out.append(part)
    return out


def text_search(query: str) -> str:
    """The `$search` string for `query` ("" when nothing is left to search for)."""
    return " ".join(terms(query)[:MAX_TERMS])


def coverage(query_terms: list[str], text: str) -> float:
    """The share of `query_terms` that `text` holds (0.0 to 1.0): how exact a text match is."""
    if not query_terms:
        return 0.0
    held = set(terms(text))
    return sum(1 for t in query_terms if t in held) / len(query_terms)


def identifiers(query: str) -> list[str]:
    """The query's identifier-looking tokens, lower-cased, in order: whitespace-separated
    tokens, stripped of surrounding punctuation, that hold a digit ("ORD-58213", "TP1345",
    "9f3c2ab", "4821"). Words without a digit (names, "company-wide") are not identifiers."""
    out: list[str] = []
    for raw in query.lower().split():
        token = raw.strip(_AROUND)
        if any(ch.isdigit() for ch in token) and token not in out:
            out.append(token)
            if len(out) == MAX_IDENTIFIERS:
                break
    return out


def holds(identifier: str, text: str) -> bool:
    """True when `text` holds `identifier` as a whole token: not inside a longer word or a
    longer identifier ("192.168.1.1" is not held by "192.168.1.11" nor by "x-192.168.1.1")."""
    j = re.escape(_JOINERS)
    pattern = rf"(?<![\w{j}]){re.escape(identifier)}(?![\w]|[{j}]\w)"
    return re.search(pattern, text.lower()) is not None
