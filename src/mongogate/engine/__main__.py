"""`python -m mongogate.engine run --data-dir D [--idle-stop-s S] [--detach]`: the engine process.

`--detach` forks before anything starts a thread: the parent waits until the engine serves
(or failed) and exits with that outcome, so the starter reaps it; the child runs in its own
session with stdout/stderr in `<data_dir>/engine.log`, surviving the starter.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def _detach(data_dir: Path) -> int | None:
    """In the parent: wait for the child's word and return the exit status. In the child: None."""
    from mongogate.engine.daemon import ALREADY_RUNNING
    from mongogate.engine.failure import word, word_of
    from mongogate.engine.files import LOG_FILE, private_file, secure_dir

    try:
        secure_dir(data_dir)
        private_file(data_dir / LOG_FILE)
    except Exception as e:  # the starter reads the failure's kind from the last line (failure.py)
        print(word_of(e), file=sys.stderr)
        return 1
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        chunks = []
        while chunk := os.read(r, 4096):
            chunks.append(chunk)
        told = b"".join(chunks).decode(errors="replace")
        if told == "ok":
            return 0
        if told == "already running":
            return ALREADY_RUNNING
        # the child's failure (one JSON line, engine/failure.py), or none: it died while starting
        died = word("unreachable", "the engine process exited while starting")  # its log says why
        print(told or died, file=sys.stderr)
        return 1
    os.close(r)
    os.setsid()
    log_fd = os.open(data_dir / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)
    os.environ["MONGOGATE_ENGINE_READY_FD"] = str(w)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mongogate.engine")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the engine for a data directory in the foreground")
    r.add_argument("--data-dir", required=True, type=Path)
    r.add_argument("--idle-stop-s", type=float, default=None)
    r.add_argument("--detach", action="store_true", help="fork, serve in the background, exit when ready")
    args = p.parse_args(argv)
    data_dir = args.data_dir.resolve()
    ready: int | None = None
    if args.detach:
        status = _detach(data_dir)
        if status is not None:
            return status
        ready = int(os.environ.pop("MONGOGATE_ENGINE_READY_FD"))
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from mongogate.engine.daemon import DEFAULT_IDLE_STOP_S, run

    idle = DEFAULT_IDLE_STOP_S if args.idle_stop_s is None else args.idle_stop_s
    return run(data_dir, idle, ready)


if __name__ == "__main__":
    sys.exit(main())
