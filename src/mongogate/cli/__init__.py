"""`mongogate serve | check | tools | audit | token | worker | engine`.

One module per command (each has `register(sub, with_config)`); this one only parses and
dispatches. Human-facing output of commands goes to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from mongogate.errors import MongogateError


def build_parser() -> argparse.ArgumentParser:
    from mongogate.cli import audit, check, engine, serve, token

    p = argparse.ArgumentParser(prog="mongogate", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument(
            "--config", help="TOML config file (default: $MONGOGATE_CONFIG, else built-in defaults)"
        )
        return sp

    for module in (serve, check, audit, token, engine):
        module.register(sub, with_config)

    from mongogate.scheduler.worker import add_worker_parser

    add_worker_parser(with_config(sub.add_parser("worker", help="run scheduled agents")))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return int(args.func(args))
    except MongogateError as e:
        print(f"mongogate: {e}", file=sys.stderr)
        return 2
