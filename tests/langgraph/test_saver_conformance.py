"""The official langgraph-checkpoint-conformance suite, base capabilities, against MongogateSaver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="needs the extra: pip install 'mongogate[langgraph]'")
conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance", reason="needs langgraph-checkpoint-conformance (the dev extra)"
)

from mongogate.langgraph import MongogateSaver  # noqa: E402
from tests.conftest import make_settings  # noqa: E402

pytestmark = pytest.mark.anyio


async def test_the_saver_passes_every_base_capability(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)

    @conformance.checkpointer_test(name="MongogateSaver")  # type: ignore[untyped-decorator]
    async def saver() -> AsyncIterator[MongogateSaver]:
        with MongogateSaver.open(settings, tenant="acme") as s:
            yield s

    report = await conformance.validate(saver)
    report.print_report()
    assert report.passed_all_base(), report
