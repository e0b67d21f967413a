"""The saver's keys and thread ids (issue 36): parts that cannot run into each other, and ids
refused when they cannot name a thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="needs the extra: pip install 'mongogate[langgraph]'")

from langgraph.checkpoint.base import empty_checkpoint
from pymongo import MongoClient

from mongogate.errors import InvalidInput
from mongogate.langgraph import MongogateSaver
from mongogate.langgraph.saver import MAX_THREAD_ID_CHARS, _key
from tests.conftest import make_settings


def _config(thread_id: Any, ns: str = "") -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def test_a_thread_and_a_namespace_holding_the_separator_are_two_keys(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Thread "x<US>b" in namespace "c" and thread "x" in namespace "b<US>c", one checkpoint id:
    the keys were the same, so the second put replaced the first thread's checkpoint."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    first, second = _config("x\x1fb", "c"), _config("x", "b\x1fc")
    with MongogateSaver.open(settings, tenant="acme") as saver:
        for config, who in ((first, "first"), (second, "second")):
            cp = empty_checkpoint()
            cp["id"] = "1ef00000-0000-6000-8000-000000000001"
            cp["channel_values"] = {"who": who}
            saver.put(config, cp, {"source": "input", "step": 0}, {})
        got = {who: saver.get_tuple(c) for c, who in ((first, "first"), (second, "second"))}
    assert {w: t.checkpoint["channel_values"]["who"] for w, t in got.items() if t is not None} == {
        "first": "first",
        "second": "second",
    }
    assert _key("acme", "x\x1fb", "c") != _key("acme", "x", "b\x1fc")
    assert _key("acme", "t", "", "1") == "acme\x1ft\x1f\x1f1"  # ids stored before key as they did


@pytest.mark.parametrize(
    "thread_id",
    ["", None, "a\x00b", "x" * (MAX_THREAD_ID_CHARS + 1), "x" * 100_000],
    ids=["empty", "missing", "nul", "one-too-long", "100000"],
)
def test_a_thread_id_that_names_no_thread_is_refused_before_anything(
    engine_uri: str, db_name: str, tmp_path: Path, thread_id: Any
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    with MongogateSaver.open(settings, tenant="acme") as saver:
        for call in (
            lambda: saver.get_tuple(_config(thread_id)),
            lambda: saver.put(_config(thread_id), empty_checkpoint(), {"source": "input", "step": 0}, {}),
            lambda: saver.delete_thread(thread_id),
        ):
            with pytest.raises(InvalidInput) as e:
                call()
            text = str(e.value)
            assert "thread_id" in text and f"1 to {MAX_THREAD_ID_CHARS} characters without NUL" in text
            assert len(text) < 400  # a long id is never echoed whole
        assert saver.get_tuple(_config("x" * MAX_THREAD_ID_CHARS)) is None  # the longest allowed
    with MongoClient[dict[str, Any]](engine_uri) as c:
        assert c[db_name]["lg_checkpoints"].count_documents({}) == 0
        assert c[db_name]["runs"].count_documents({"run_id": {"$regex": "^langgraph-"}}) == 1  # its lease
