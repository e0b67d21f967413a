"""Red team of recall's byte cap (`memory.long_term.max_response_bytes`, `recall/pages.py`
`cap_items`): each memory is measured as the JSON the tool returns for it, so the evidence the
recall tool adds to each one (`similarity`, `matched_terms`: the query words the memory holds)
counts too. A question of many words that every memory holds made each item's `matched_terms`
as long as the question, outside the measure: the reply passed the cap by up to the recall limit
times the query's length (at the defaults, 50 x 2,000 characters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import ok

pytestmark = pytest.mark.anyio

CAP = 16 * 1024
WORDS = [f"w{j:03d}" for j in range(200)]


async def test_recall_counts_matched_terms_within_the_byte_cap(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"long_term": {"max_response_bytes": CAP}})
    async with Client(build_server(settings)) as c:
        for i in range(30):
            await ok(c, "remember", text=f"note {i}: " + " ".join(WORDS), key=f"k{i}")
        r = await c.call_tool("recall", {"query": " ".join(WORDS), "limit": 50})
    assert not r.is_error and isinstance(r.structured_content, dict)
    items = r.structured_content["memories"]
    assert items and len(items[0]["matched_terms"]) == len(WORDS)  # the evidence is there
    size = len(json.dumps(r.structured_content, ensure_ascii=False, separators=(",", ":")).encode())
    assert size <= CAP, size
    assert r.structured_content["truncated"] is True
