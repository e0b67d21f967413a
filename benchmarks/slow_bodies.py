"""Withheld request bodies: does the server's memory return to its baseline once they are gone?

Issue 19: 60 bodies of 4 MiB, each sent but for its last byte and then abandoned, added 215 MB
to the server that stayed after the connections closed. Here a real `mongogate serve --http`
process (database: an embedded engine in this process, so the server's RSS is its own) is
measured from /proc: its RSS after warm-up (baseline), with `--bodies` withheld bodies of
`--mib` MiB in flight (peak), and once every one of those connections is closed and the server
has answered a normal request again (after). Two modes per round, interleaved, a fresh server
each: `returned` (as shipped) and `kept` (`python -m tests.fault_harness --keep-freed-memory serve`:
the server does not hand freed memory back, the old behaviour).

    python benchmarks/slow_bodies.py [--rounds 2] [--bodies 60] [--mib 4] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from lib.results import write_section  # benchmarks/lib/results.py, beside this script

from mongogate.engine.embedded import EmbeddedEngine

#: the checkout: `python -m tests.fault_harness` runs from it
ROOT = Path(__file__).resolve().parents[1]

INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def normal_request(port: int) -> None:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        data=INIT,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()


def head(port: int, length: int) -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def one(uri: str, tmp: Path, keep: bool, bodies: int, mib: int) -> tuple[float, float, float]:
    port = free_port()
    env = {**os.environ, "MONGOGATE_DATABASE__URI": uri, "MONGOGATE_SERVER__DATA_DIR": str(tmp)}
    env["MONGOGATE_SERVER__MAX_PENDING_HEADS_PER_ADDRESS"] = str(bodies + 10)
    env["MONGOGATE_AUTH__TENANT"] = "acme"
    env["MONGOGATE_SERVER__BODY_TIMEOUT_S"] = "3"  # the server closes them (408), as in the issue
    # the baseline through the test harness (a hook passed as an argument, never the environment)
    start = ["tests.fault_harness", "--keep-freed-memory"] if keep else ["mongogate.cli"]
    cmd = [
        sys.executable,
        "-m",
        *start,
        "serve",
        "--http",
        "--port",
        str(port),
        "--insecure-no-auth",
    ]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("server did not start") from None
                time.sleep(0.1)
        for _ in range(5):
            normal_request(port)
        baseline = rss_mib(proc.pid)
        size = mib * 1024 * 1024 - 100  # the whole body within server.max_request_bytes (4 MiB)
        body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * size + b'"}}'
        socks = []
        for _ in range(bodies):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(head(port, len(body)) + body[:-1])  # all but the last byte
            socks.append(s)
        time.sleep(1.0)  # let the server read what was sent (not an assertion: a measurement)
        peak = rss_mib(proc.pid)
        for s in socks:  # the body deadline closes each of them with 408
            while s.recv(65536):
                pass
            s.close()
        normal_request(port)
        time.sleep(1.5)  # the server notices the closed connections and frees what they held
        normal_request(port)
        after = rss_mib(proc.pid)
        return baseline, peak, after
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bodies", type=int, default=60)
    p.add_argument("--mib", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mg-bodies-"))
    engine = EmbeddedEngine(tmp / "engine")
    uri = engine.start()
    load0 = os.getloadavg()
    rows = []
    try:
        for r in range(args.rounds):
            for keep in (True, False):
                b, pk, a = one(uri, tmp, keep, args.bodies, args.mib)
                mode = "kept (old)" if keep else "returned"
                rows.append(f"| {r + 1} | {mode} | {b:.0f} | {pk:.0f} | {a:.0f} | {a - b:+.0f} |")
                print(rows[-1], flush=True)
    finally:
        engine.stop()
    load1 = os.getloadavg()
    cmd = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/slow_bodies.py", *sys.argv[1:]])
    body = (
        f"Command: `{cmd}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other work (load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        f"A `mongogate serve --http` process; {args.bodies} connections each send a {args.mib} MiB "
        "body but its last byte and waits until the body deadline (`server.body_timeout_s`, 3 s here) "
        "closes it with 408. RSS of the server process (MiB) after warm-up, with "
        "the bodies in flight, and after they closed and a normal request was served. `kept (old)` = "
        "`python -m tests.fault_harness --keep-freed-memory serve`, the behaviour before.\n\n"
        "| round | mode | baseline | peak | after | after − baseline |\n|---:|---|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )
    print(body)
    if not args.no_write:  # the reading of the numbers (RESULTS.md) is written by hand below the table
        write_section("slow_bodies", body)


if __name__ == "__main__":
    main()
