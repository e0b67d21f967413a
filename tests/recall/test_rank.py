"""Fusion of the exact-term and meaning rankings (recall/rank.py) and query terms (recall/terms.py)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mongogate.recall.searchindex.rank import (
    DEFAULT_FUSION,
    Fusion,
    fuse,
    fuse_recall,
    strong_hits,
    text_ranking,
)
from mongogate.recall.searchindex.terms import MAX_TERMS, coverage, holds, identifiers, terms, text_search


def test_fuse_is_reciprocal_rank_fusion() -> None:
    got = dict(fuse([["a", "b", "c"], ["b", "d"]], k=60))
    assert got["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert got["a"] == pytest.approx(1 / 61)
    assert got["d"] == pytest.approx(1 / 62)
    assert got["c"] == pytest.approx(1 / 63)
    assert [d for d, _ in fuse([["a", "b", "c"], ["b", "d"]], k=60)] == ["b", "a", "d", "c"]


def test_fuse_ties_are_deterministic_best_rank_then_id() -> None:
    # x and y both rank 1 once: same score, same best rank -> id order, whatever the input order
    assert [d for d, _ in fuse([["y"], ["x"]])] == ["x", "y"]
    assert [d for d, _ in fuse([["x"], ["y"]])] == ["x", "y"]
    # equal score, different best rank: 1/(k+1) + 1/(k+3) vs 2/(k+2) differ, so build a real tie
    got = fuse([["p", "q"], ["q", "p"]], k=0)
    assert [d for d, _ in got] == ["p", "q"] and got[0][1] == got[1][1]


def test_fuse_counts_an_id_repeated_in_one_ranking_once_at_its_best_place() -> None:
    assert dict(fuse([["a", "a", "b"]], k=0)) == {"a": 1.0, "b": pytest.approx(1 / 3)}


def test_fuse_weights_let_one_ranking_count_more() -> None:
    assert fuse([["t"], ["v"]], weights=[1.0, 2.0])[0][0] == "v"
    assert fuse([["t"], ["v"]], weights=[3.0, 2.0])[0][0] == "t"
    assert fuse([], k=1) == []


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"k": -1}, "k=-1"),
        ({"k": math.nan}, "k=nan"),
        ({"weights": [1.0]}, "1 weights for 2 rankings"),
        ({"weights": [1.0, -0.5]}, "weight=-0.5"),
        ({"weights": [1.0, math.inf]}, "weight=inf"),
    ],
)
def test_fuse_refuses_meaningless_parameters(kwargs: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        fuse([["a"], ["b"]], **kwargs)  # type: ignore[arg-type]


@given(st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=8), max_size=4), st.integers(0, 100))
def test_fuse_returns_every_id_once_best_first(rankings: list[list[str]], k: int) -> None:
    got = fuse(rankings, k=k)
    assert sorted(d for d, _ in got) == sorted({d for r in rankings for d in r})
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(got))
    assert fuse(rankings, k=k) == got  # deterministic


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is the status of ORD-58213?", ["status", "ord", "58213"]),
        ("what days do I work out?", ["days", "work"]),
        ("Ahmed's birthday", ["ahmed", "birthday"]),
        ('"dark mode" -light', ["dark", "mode", "light"]),  # $text syntax is neutralised
        ("Dark DARK dark", ["dark"]),
        ("the of and", []),
        ("snake_case_name", ["snake", "case", "name"]),
        ("Größe STRASSE", ["größe", "strasse"]),  # lower-cased as the engine does, not folded
    ],
)
def test_terms_are_lowercased_words_without_stop_words(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


def test_text_search_is_the_terms_joined_and_bounded() -> None:
    assert text_search('status of "ORD-58213" -refund') == "status ord 58213 refund"
    assert text_search("what is it?") == ""
    many = " ".join(f"w{i}" for i in range(100))
    assert len(text_search(many).split()) == MAX_TERMS


def test_coverage_is_the_share_of_query_terms_held() -> None:
    q = terms("status of ORD-58213")
    assert coverage(q, "Order ORD-58213: status shipped") == 1.0
    assert coverage(q, "Order ORD-58231 was refunded") == pytest.approx(1 / 3)
    assert coverage([], "anything") == 0.0


def test_text_ranking_puts_the_exact_match_first_and_keeps_the_engine_order_for_ties() -> None:
    hits = [("twin", "SKU HD-220-BLK is the black hoodie"), ("it", "SKU HD-202-BLK is the black hoodie")]
    assert text_ranking("HD-202-BLK", hits) == [("it", 1.0), ("twin", pytest.approx(2 / 3))]
    assert [d for d, _ in text_ranking("black", hits)] == ["twin", "it"]


def test_fused_recall_puts_an_exact_identifier_first_over_its_near_twin() -> None:
    # By meaning the twins are neighbours and the wrong one may rank first: the text decides.
    text_hits = [("ord1", "Order ORD-58213 was shipped"), ("ord2", "Order ORD-58231 was refunded")]
    fused = fuse_recall("ORD-58231", text_hits, ["ord1", "ord2", "other"])
    assert fused[0][0] == "ord2"


def test_fused_recall_lets_a_one_word_overlap_count_little() -> None:
    # "what days do I work out?": $text matches a memory on the word "work" alone; the vector
    # ranking has the gym memory first. Plain RRF put the one-word match on top.
    text_hits = [("meetings", "mornings are for focused work"), ("logs", "logs deleted after 30 days")]
    vector = ["gym", "commit", "meetings"]
    assert fuse([["meetings", "logs"], vector], k=60)[0][0] == "meetings"  # the failure it fixes
    assert fuse_recall("what days do I work out?", text_hits, vector)[0][0] == "gym"


def test_fused_recall_ignores_text_hits_that_hold_no_query_term() -> None:
    # (on MongoDB, stemming can match "zebras" to "zebra": the vector ranking still has it)
    got = fuse_recall("zebra", [("z", "a zebra"), ("n", "nothing shared")], ["v1", "v2"], DEFAULT_FUSION)
    assert {d for d, _ in got} == {"z", "v1", "v2"}
    heavy = fuse_recall("zebra", [("z", "a zebra")], ["v1"], Fusion(text_weight=2.0))
    assert heavy[0][0] == "z"


@pytest.mark.parametrize(
    "kwargs", [{"k": -1.0}, {"text_weight": math.nan}, {"exactness_power": -2.0}, {"vector_weight": -1}]
)
def test_fusion_refuses_meaningless_knobs(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Fusion"):
        Fusion(**kwargs)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what is PAY-1289 about?", ["pay-1289"]),
        ("192.168.1.1", ["192.168.1.1"]),
        ("PR #4821, then (TP1345).", ["4821", "tp1345"]),
        ("who runs the company-wide meeting?", []),  # dashed words without a digit are words
        ("Kowalski", []),
    ],
)
def test_identifiers_are_the_tokens_with_a_digit(query: str, expected: list[str]) -> None:
    assert identifiers(query) == expected


@pytest.mark.parametrize(
    ("identifier", "text", "held"),
    [
        ("192.168.1.1", "The router is at 192.168.1.1.", True),
        ("192.168.1.1", "The printer is at 192.168.1.11.", False),  # the same $text terms
        ("ord-58213", "Order ORD-58213 was shipped", True),
        ("ord-58213", "Order ORD-582130 was shipped", False),
        ("58213", "Order ORD-58213 was shipped", False),  # a part of a longer identifier
        ("v2.14.3", "Release v2.14.3 fixed the crash", True),
    ],
)
def test_a_memory_holds_an_identifier_only_as_a_whole_token(identifier: str, text: str, held: bool) -> None:
    assert holds(identifier, text) is held


def test_fused_recall_puts_the_memory_naming_the_identifier_first_even_below_meaning() -> None:
    # "PR 4821": the memory holds "4821" but not "pr" (half the terms), and meaning does not
    # find it at all among many memories: the share weighting alone left it far down
    hits = [("pr", "Pull request 4821 adds retries"), ("ip", "The printer is at 192.168.1.11.")]
    vector = [f"v{i}" for i in range(20)]
    assert fuse_recall("PR 4821", hits, vector, Fusion(identifiers_first=False))[0][0] == "v0"
    got = fuse_recall("PR 4821", hits, vector)
    assert got[0][0] == "pr"
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)  # scores stay best first
    twins = [("eleven", "The printer is at 192.168.1.11."), ("one", "The router is at 192.168.1.1.")]
    assert fuse_recall("192.168.1.1", twins, ["eleven", "one"])[0][0] == "one"


def test_strong_hits_hold_the_most_identifiers_and_need_at_least_one() -> None:
    hits = [("a", "ORD-1 and INC-2"), ("b", "ORD-1 only"), ("c", "no identifier")]
    assert strong_hits("ORD-1 INC-2", hits) == {"a"}
    assert strong_hits("ORD-1", hits) == {"a", "b"}
    assert strong_hits("ORD-9", hits) == set()
    assert strong_hits("what about orders?", hits) == set()
