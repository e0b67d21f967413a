"""Probes answer when the MCP connection budget is full; one address holds few unfinished heads.

Issue 19: half-open connections (heads never finished) filled `server.max_connections` until
`/healthz` itself answered 503, and 20 new ones a second kept the server at its cap. Real
sockets; waits are for events (the server's connection count, a socket reaching EOF).
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx2

from tests.server.test_slow_clients_http import (
    HANG_GUARD_S,
    INIT,
    connect,
    head,
    normal_client_is_served,
    read_to_eof,
    serving,
    wait_until,
)

from . import rpc


def test_probes_answer_while_half_open_connections_fill_the_budget(engine_uri: str, tmp_path: Path) -> None:
    limits = {"header_timeout_s": 300, "max_connections": 10, "max_pending_heads_per_address": 1000}
    with serving(engine_uri, tmp_path, **limits) as http:
        stalled = [connect(http, head(http, complete=False)) for _ in range(12)]
        wait_until(lambda: http.open_connections >= 12)  # the MCP budget (10) is full
        with httpx2.Client(timeout=HANG_GUARD_S) as c:
            base = f"http://{http.host}:{http.port}"
            assert c.get(base + "/healthz").status_code == 200
            assert c.get(base + "/readyz").status_code == 200
            refused = c.post(http.url, content=INIT, headers=rpc.headers(None))
            assert refused.status_code == 503 and "server.max_connections" in refused.text
        for s in stalled:
            s.close()
        wait_until(lambda: http.open_connections == 0)
        normal_client_is_served(http)


def test_one_address_holds_at_most_its_share_of_unfinished_heads(engine_uri: str, tmp_path: Path) -> None:
    """The head deadline is long (300 s): only the per-address limit can close anything here."""
    limits = {"header_timeout_s": 300, "max_connections": 200, "max_pending_heads_per_address": 3}
    with serving(engine_uri, tmp_path, **limits) as http:
        first = [connect(http, head(http, complete=False)) for _ in range(3)]
        wait_until(lambda: http.open_connections == 3)
        churn: list[socket.socket] = []
        for _ in range(20):  # an attacker opening new half-open connections: each closes its oldest
            churn.append(connect(http, b""))
        for s in first + churn[:17]:
            answer = read_to_eof(s)
            assert answer.startswith(b"HTTP/1.1 429") and b"server.max_pending_heads_per_address" in answer
        wait_until(lambda: http.open_connections == 3)  # never more than 3 from this address
        normal_client_is_served(http)  # a complete request from the same address is served
        with httpx2.Client(timeout=HANG_GUARD_S) as c:
            assert c.get(f"http://{http.host}:{http.port}/healthz").status_code == 200
        for s in first + churn:
            s.close()
