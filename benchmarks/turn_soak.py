"""Crash and race soak for turns (not in CI): two server processes on one embedded engine.

    .venv/bin/python benchmarks/turn_soak.py [--seconds 180] [--record]

Scenario `kill -9`: client lanes run whole turns, each call on a random server, while a
killer SIGKILLs one server every few seconds and restarts it. Clients retry the same turn
(same turn_id and text) on the other server; a lost `begin_turn` reply is taken over at
once, a lost `end_turn` acknowledgement is retried with the same lease.

Scenario `expiry race`: server B's clock runs 60 s ahead, so every `begin_turn` on B meets
A's lease at its expiry; it races A's `end_turn` (odd trials: another turn; even: the same).

Printed per scenario: attempts / acknowledged / lost / duplicated / answered twice / max
lockout seconds. `lost`: an acknowledged answer not stored (or stored differently);
`duplicated`: a turn with more than one user message or answer stored; `answered twice`:
two different answers acknowledged for one turn, or a client told `answered: false` whose
reply is not the one stored; `max lockout`: the longest a turn waited between its first
refused or failed `begin_turn` and its successful one.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from pymongo import AsyncMongoClient

from mongogate.db import EmbeddedEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import write_section

ROOT = Path(__file__).resolve().parents[1]
DB = "soak"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, env: dict[str, str], data: Path, *, skew_ms: int = 0) -> None:
        self.env, self.data, self.port = env, data, free_port()
        #: a clock skewed ahead runs through the test harness (tests/fault_harness.py)
        self.exe = (
            [sys.executable, "-m", "tests.fault_harness", "--clock-skew-ms", str(skew_ms)]
            if skew_ms
            else [sys.executable, "-m", "mongogate.cli"]
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        cmd = [*self.exe, "serve", "--http", "--insecure-no-auth"]
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(self.port)],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import socket

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@dataclass
class Stats:
    attempts: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    answered_twice: int = 0
    max_lockout_s: float = 0.0
    kills: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def row(self, name: str) -> str:
        extra = (
            f"{self.kills} kills" if self.kills else ", ".join(f"{k}: {v}" for k, v in self.outcomes.items())
        )
        return (
            f"| {name} | {self.attempts} | {self.acknowledged} | {self.lost} | {self.duplicated} | "
            f"{self.answered_twice} | {self.max_lockout_s:.2f} | {extra} |"
        )


async def call(url: str, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
    """One call on a fresh client: (ok, structured result or error text). Connection loss raises."""
    async with Client(url) as c:
        r = await c.call_tool(tool, args)
    if r.is_error:
        return False, r.content[0].text  # type: ignore[union-attr]
    return True, r.structured_content


async def verify(messages: Any, sid: str, tid: str, acked: str, told_false: list[str], st: Stats) -> None:
    docs = [d async for d in messages.find({"session_id": sid, "turn_id": tid})]
    roles = Counter(d["key"] for d in docs)
    users = sum(1 for d in docs if d["role"] == "user")
    answers = [d["content"] for d in docs if d["key"] == f"{tid}:assistant"]
    if users > 1 or len(answers) > 1 or max(roles.values(), default=0) > 1:
        st.duplicated += 1
    if not answers or answers[0] != acked:
        st.lost += 1
    if answers and told_false and answers[0] not in told_false:
        st.answered_twice += 1
    await messages.delete_many({"session_id": sid, "turn_id": tid})  # keep the collection small


async def _open_session(servers: list[Server]) -> str:
    while True:
        try:
            ok, res = await call(random.choice(servers).url, "create_session", {})
            if ok:
                return str(res["session_id"])
        except Exception:
            await anyio.sleep(0.1)


async def _end_turn(servers: list[Server], sid: str, tid: str, lease: str, reply: str) -> str | None:
    """The same lease, on either server, until it is decided: the reply when acknowledged, None
    when refused (lease_lost: begin_turn again decides)."""
    for _ in range(20):
        try:
            ok, _res = await call(
                random.choice(servers).url,
                "end_turn",
                {"session_id": sid, "turn_id": tid, "lease_id": lease, "reply": reply},
            )
        except Exception:
            await anyio.sleep(0.05)
            continue
        return reply if ok else None
    return None


async def kill_scenario(servers: list[Server], messages: Any, seconds: float, lanes: int) -> Stats:
    st = Stats()
    stop_at = time.monotonic() + seconds

    async def killer() -> None:
        while time.monotonic() < stop_at:
            await anyio.sleep(random.uniform(2.0, 5.0))
            victim = random.choice(servers)
            victim.kill9()
            st.kills += 1
            await anyio.to_thread.run_sync(victim.start)

    async def lane(k: int) -> None:
        sid = await _open_session(servers)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            tid, text = f"l{k}-t{n}", f"question {k}/{n}"
            st.attempts += 1
            acked: str | None = None
            told_false: list[str] = []
            first_refusal: float | None = None
            attempt = 0
            while acked is None and time.monotonic() < stop_at + 60:
                attempt += 1
                try:
                    ok, res = await call(
                        random.choice(servers).url,
                        "begin_turn",
                        {"session_id": sid, "turn_id": tid, "text": text},
                    )
                except Exception:
                    first_refusal = first_refusal or time.monotonic()
                    await anyio.sleep(0.05)
                    continue
                if not ok:
                    first_refusal = first_refusal or time.monotonic()
                    await anyio.sleep(0.05)
                    continue
                if first_refusal is not None:
                    st.max_lockout_s = max(st.max_lockout_s, time.monotonic() - first_refusal)
                    first_refusal = None
                if res["answered"]:
                    acked = res["answer"]
                    break
                reply = f"answer {tid} #{attempt}"  # what "the model" said this time
                told_false.append(reply)
                acked = await _end_turn(servers, sid, tid, str(res["lease_id"]), reply)
            if acked is not None:
                st.acknowledged += 1
                await verify(messages, sid, tid, acked, told_false, st)

    async with anyio.create_task_group() as tg:
        tg.start_soon(killer)
        for k in range(lanes):
            tg.start_soon(lane, k)
    return st


async def race_scenario(a: Server, b: Server, messages: Any, seconds: float) -> Stats:
    st = Stats()
    stop_at = time.monotonic() + seconds
    async with Client(a.url) as ca, Client(b.url) as cb:
        sid = (await ca.call_tool("create_session", {})).structured_content["session_id"]
        i = 0
        while time.monotonic() < stop_at:
            i += 1
            same = i % 2 == 0
            t1, q1 = f"t{i}", f"q{i}"
            t2, q2 = (t1, q1) if same else (f"u{i}", f"n{i}")
            st.attempts += 1
            start = (
                await ca.call_tool("begin_turn", {"session_id": sid, "turn_id": t1, "text": q1})
            ).structured_content
            out: dict[str, Any] = {}

            async def end(start: Any = start, t1: str = t1, i: int = i, out: dict[str, Any] = out) -> None:
                r = await ca.call_tool(
                    "end_turn",
                    {"session_id": sid, "turn_id": t1, "lease_id": start["lease_id"], "reply": f"old {i}"},
                )
                out["end"] = not r.is_error

            async def begin(t2: str = t2, q2: str = q2, out: dict[str, Any] = out) -> None:
                out["begin"] = (
                    await cb.call_tool("begin_turn", {"session_id": sid, "turn_id": t2, "text": q2})
                ).structured_content

            async with anyio.create_task_group() as tg:
                tg.start_soon(end)
                tg.start_soon(begin)
            a_won, begun = out["end"], out["begin"]
            st.outcomes["old owner first" if a_won else "new owner first (boundary hit)"] += 1
            told_false = [f"old {i}"] if a_won else []
            if not begun["answered"]:
                await cb.call_tool(
                    "end_turn",
                    {"session_id": sid, "turn_id": t2, "lease_id": begun["lease_id"], "reply": f"new {i}"},
                )
                told_false.append(f"new {i}")
            if same:
                acked = f"old {i}" if a_won else f"new {i}"
                if begun["answered"] and begun["answer"] != f"old {i}":
                    st.answered_twice += 1
                st.acknowledged += 1
                await verify(messages, sid, t1, acked, [acked], st)
            else:
                docs = {d["key"]: d async for d in messages.find({"session_id": sid})}
                stale = docs.get(f"{t1}:assistant")
                if (stale is not None) != a_won or (stale and stale["seq"] > docs[f"{t2}:user"]["seq"]):
                    st.answered_twice += 1  # a stale owner's reply landed
                st.acknowledged += 1
                await verify(messages, sid, t2, f"new {i}", [f"new {i}"], st)
                await messages.delete_many({"session_id": sid})
    return st


async def main_async(seconds: float, lanes: int, record: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="mongogate-soak-"))
    engine = EmbeddedEngine(tmp / "engine")
    uri = engine.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_DATABASE__URI": uri,
        "MONGOGATE_DATABASE__NAME": DB,
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_SERVER__DATA_DIR": str(tmp / "data"),
    }
    started = time.monotonic()
    try:
        async with AsyncMongoClient[dict[str, Any]](uri) as mc:
            messages = mc[DB]["messages"]
            servers = [Server(env, tmp), Server(env, tmp)]
            for s in servers:
                s.start()
            kill = await kill_scenario(servers, messages, seconds * 2 / 3, lanes)
            for s in servers:
                s.stop()
            a, b = Server(env, tmp), Server(env, tmp, skew_ms=60_000)
            a.start()
            b.start()
            race = await race_scenario(a, b, messages, seconds / 3)
            a.stop()
            b.stop()
    finally:
        engine.stop()
    header = (
        "| scenario | attempts | acknowledged | lost | duplicated | answered twice | max lockout s "
        "| notes |\n|---|---:|---:|---:|---:|---:|---:|---|"
    )
    table = "\n".join([header, kill.row("kill -9, two servers"), race.row("expiry race, two servers")])
    print(table)
    if record:
        body = (
            f"Command: `.venv/bin/python benchmarks/turn_soak.py --seconds {seconds:g} --record` "
            f"({lanes} client lanes; not in CI). Python {sys.version.split()[0]}, embedded engine, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"whole run {time.monotonic() - started:.0f} s.\n\n"
            f"{table}\n\n"
            "`max lockout` is the longest a turn waited from its first refused or failed `begin_turn` "
            "to its successful one: server restarts and connection failures included, never a lease "
            "expiry (a retry of the same turn takes the lease over at once).\n"
        )
        write_section("turn soak", body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--lanes", type=int, default=4)
    p.add_argument("--record", action="store_true", help="write the result to benchmarks/RESULTS.md")
    a = p.parse_args()
    anyio.run(main_async, a.seconds, a.lanes, a.record)


if __name__ == "__main__":
    main()
