"""Term ranking shared by recall's in-process index and `search_messages`: tokens and BM25.

- case and accent folding: "Café" and "cafe" are one token (NFKD, combining marks dropped, casefold);
- English stop words dropped (`STOP_WORDS`, as MongoDB's "english" text index drops them);
- words stemmed with the Snowball English stemmer ("invoices" finds "invoice");
- identifiers kept whole: a whitespace-separated token (stripped of surrounding punctuation) that
  holds a digit, an "@" or a "/" ("ORD-58213", "ana@example.com", "/etc/hosts", "v2.14.3") is one
  token as typed (folded), and its word parts are tokens too, so "58213" alone still matches while
  the whole identifier, rarer, weighs more;
- query syntax is plain words: "-word" is "word", quotes are nothing.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Any

__all__ = ["STOP_WORDS", "bm25", "fold", "query_tokens", "tokens"]

_STOP_TEXT = """
    a about above after again against all am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
    during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
    here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
    itself let's me more most mustn't my myself no nor not of off on once only or other ought our ours
    ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll they're they've
    this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what
    what's when when's where where's which while who who's whom why why's will with won't would wouldn't
    you you'd you'll you're you've your yours yourself yourselves
"""
#: English stop words, as MongoDB's "english" text index drops them
#: English stop words, as MongoDB's "english" text index drops them
STOP_WORDS = frozenset(_STOP_TEXT.split())

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_AROUND = "?!,;:\"'()[]{}<>#*`.-"
#: the longest token kept (longer runs are cut, so one huge token cannot bloat the index)
MAX_TOKEN = 64


def fold(text: str) -> str:
    """Lower-cased, accents removed ("Crème Brûlée" -> "creme brulee")."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    """The English stemmer, made at the first word stemmed: importing snowballstemmer costs about
    15 ms that a server's start does not need (benchmarks/startup.py)."""
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _identifier(token: str) -> bool:
    return any(ch.isdigit() or ch in "@/" for ch in token) and any(ch.isalnum() for ch in token)


def tokens(text: str) -> list[str]:
    """Every token of `text`, in order, repeats kept (term frequencies count them)."""
    out: list[str] = []
    folded = fold(text)
    for raw in folded.split():
        token = raw.strip(_AROUND)
        if _identifier(token) and not token.isdigit():
            out.append(token[:MAX_TOKEN])
        for match in _WORD.finditer(token):
            word = match.group(0)
            if word in STOP_WORDS:
                continue
            if word.endswith("'s"):
                word = word[:-2]
            for part in word.split("'"):
                if part and part not in STOP_WORDS:
                    out.append(part[:MAX_TOKEN] if part.isdigit() else _stem(part[:MAX_TOKEN]))
    return out


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in order."""
    return list(dict.fromkeys(tokens(text)))


K1 = 1.2
B = 0.75


def bm25(query: list[str], docs: list[list[str]]) -> list[float]:
    """Okapi BM25 (k1 1.2, b 0.75) of each tokenised doc for the query's distinct tokens, over the
    statistics of `docs` themselves, divided by what a doc of average length holding each query
    token once would earn (the sum of their idf) and capped at 1: comparable across queries."""
    n = len(docs)
    if n == 0 or not query:
        return [0.0] * n
    counts = [Counter(d) for d in docs]
    avg = (sum(len(d) for d in docs) / n) or 1.0
    out = [0.0] * n
    upper = 0.0
    for term in dict.fromkeys(query):
        df = sum(1 for c in counts if term in c)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        upper += idf
        for i, c in enumerate(counts):
            tf = c.get(term, 0)
            if tf:
                out[i] += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len(docs[i]) / avg))
    return [min(1.0, s / upper) if upper > 0 else 0.0 for s in out]
