"""Issue 19.5: a full disk, for real: the engine's data directory is on a 4 MiB tmpfs that the test
fills with a file, then frees. Clients must be told the disk is full (not "retry in about 5 s"),
and `/readyz` must answer 503 while writes are refused and 200 again once they succeed.

Mounting a tmpfs needs root (the suite's machine runs as root); elsewhere that test is skipped,
and the second one (mongod's `OutOfDiskSpace` code through a failpoint) still runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from mongogate.engine.embedded import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings

from . import rpc

pytestmark = pytest.mark.anyio


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted at the end."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@contextlib.contextmanager
def engine_on(path: Path) -> Iterator[str]:
    engine = EmbeddedEngine(path)
    uri = engine.start()
    try:
        yield uri
    finally:
        engine.stop()


def fill(mnt: Path, leave: int) -> Path:
    """Write a file that leaves about `leave` bytes free on the filesystem. The server may write
    beside it (message search derives the turn's messages in the background), so the space can
    run out first: then the file gives `leave` bytes back."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    filler = mnt / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            want = max(0, free - leave)
            while want > 0:
                want -= f.write(b"\0" * min(want, 1 << 20))
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            f.truncate(max(0, os.fstat(f.fileno()).st_size - leave))
    return filler


@pytest.mark.timeout(300)  # the readiness wait below is bounded at 150 s
async def test_disk_full_is_said_and_readyz_is_503_until_writes_succeed(
    small_disk: Path, db_name: str, tmp_path: Path
) -> None:
    with engine_on(small_disk / "data") as uri:
        # the probe's write is timed by ready_timeout_s (2 s): a loaded machine took longer once
        # after the space came back (503 where 200 was due); the wait is not what is tested here
        server = {"ready_timeout_s": 60.0}
        settings = make_settings(uri, db_name, tmp_path / "srv", auth=jwt_auth(), server=server)
        token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
        with BackgroundHttpServer(build_server(settings, transport="http")) as http:
            base = http.url.removesuffix("/mcp")
            async with httpx2.AsyncClient(timeout=60) as hc:
                mcp = await rpc.open_session(hc, http.url, token)
                rid = iter(range(2, 1000))

                async def call(name: str, **arguments: Any) -> dict[str, Any]:
                    r = await rpc.call_tool(hc, http.url, token, mcp, name, arguments, rid=next(rid))
                    return rpc.result(r)

                sid = (await call("create_session"))["structuredContent"]["session_id"]
                first = await call("begin_turn", session_id=sid, turn_id="t0", text="before")
                await call(
                    "end_turn",
                    session_id=sid,
                    turn_id="t0",
                    lease_id=first["structuredContent"]["lease_id"],
                    reply="ok",
                )
                assert (await hc.get(base + "/readyz")).status_code == 200

                filler = fill(small_disk, leave=8 * 1024)
                refused = []
                for _ in range(2):  # the same answer on a retry: it will not succeed soon
                    res = await call("begin_turn", session_id=sid, turn_id="t1", text="x" * 60_000)
                    assert res["isError"] is True, res
                    refused.append(res["content"][0]["text"])
                ready = await hc.get(base + "/readyz")
                health = await hc.get(base + "/healthz")
                ctx = await call("load_context", session_id=sid)  # reads still work

                filler.unlink()
                # Waited for as a balancer waits, a probe at a time: in the full suite on a loaded
                # machine this in-process engine left pymongo's monitor unanswered for over 5 s
                # right after the space came back (three times in seven runs; never alone): the
                # probes of those seconds failed (unavailable, or their write cancelled), the calls
                # retryable; once, 12 probes half a second apart all came before it answered again.
                # The deadline bounds a hang (an engine that never recovers), it is not a margin on
                # how fast it recovers.
                deadline = time.monotonic() + 150
                while True:
                    again = await hc.get(base + "/readyz")
                    if again.status_code == 200 or time.monotonic() > deadline:
                        break
                    await anyio.sleep(0.5)
                for _ in range(3):  # a client retries what is said retryable
                    after = await call("begin_turn", session_id=sid, turn_id="t1", text="x" * 60_000)
                    if not after.get("isError") or "(retryable)" not in after["content"][0]["text"]:
                        break
    for text in refused:
        assert text.startswith("[storage_error] ") and "(retryable)" not in text, text
        assert "disk is full" in text and "Retrying soon will not help" in text, text
    assert ready.status_code == 503 and ready.json() == {"status": "writes_refused"}
    assert health.status_code == 200
    assert ctx.get("isError") is not True and [
        m["content"] for m in ctx["structuredContent"]["messages"]
    ] == [
        "before",
        "ok",
    ]
    assert again.status_code == 200 and again.json() == {"status": "ready"}
    assert after.get("isError") is not True, after


async def test_out_of_disk_space_code_through_a_failpoint(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: AsyncMongoClient[dict[str, object]]
) -> None:
    """What mongod answers on a full disk (`OutOfDiskSpace`, code 14031), injected with the engine's
    failCommand failpoint (scoped to this test's database; it also runs without root)."""
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    commands = ["insert", "update", "findAndModify"]
    namespaces = [f"{db_name}.{c}" for c in ("sessions", "messages", "runs", "mongogate_write_probe")]

    async def failpoint(mode: str) -> None:
        data = {"failCommands": commands, "errorCode": 14031, "namespaces": namespaces}
        try:
            await mongo.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})
        except OperationFailure as e:  # pragma: no cover - only on an external MONGODB_URI
            pytest.skip(f"server has no failCommand failpoint: {e}")

    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        base = http.url.removesuffix("/mcp")
        async with httpx2.AsyncClient(timeout=60) as hc:
            mcp = await rpc.open_session(hc, http.url, token)
            r = await rpc.call_tool(hc, http.url, token, mcp, "create_session", {}, rid=2)
            sid = rpc.result(r)["structuredContent"]["session_id"]
            await failpoint("alwaysOn")
            try:
                args = {"session_id": sid, "turn_id": "t1", "text": "hi"}
                refused = rpc.result(await rpc.call_tool(hc, http.url, token, mcp, "begin_turn", args, rid=3))
                ready = await hc.get(base + "/readyz")
            finally:
                await failpoint("off")
            again = await hc.get(base + "/readyz")
    text = refused["content"][0]["text"]
    assert text.startswith("[storage_error] ") and "(retryable)" not in text and "disk is full" in text, text
    assert ready.status_code == 503 and ready.json() == {"status": "writes_refused"}
    assert again.status_code == 200
