"""`mongogate erase --tenant T [--subject S] [--json]`: every document of a tenant, or of one
subject within it, removed from every mongogate collection, its audit events redacted, and a
receipt printed (counts per collection, the time, a digest of the ids; docs/security.md, "Erasure").

Safe while servers serve; a run killed half way is resumed by the next (the receipt says how
many runs it took); a second erasure removes 0. Revoke the tenant's credentials first: calls it
makes while the erasure runs may write documents after the erasure passed them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from mongogate.cli.common import settings_from


def cmd_erase(args: argparse.Namespace) -> int:
    from mongogate.assembly import NO_FAULTS, erase
    from mongogate.clock import SYSTEM_CLOCK

    settings = settings_from(args)
    receipt = asyncio.run(
        erase(
            settings,
            args.tenant,
            args.subject,
            batch=args.batch_size,
            clock=args.clock or SYSTEM_CLOCK,
            faults=args.faults or NO_FAULTS,
        )
    )
    if args.json:
        print(json.dumps(receipt.as_json(), ensure_ascii=False), flush=True)
    else:
        for line in receipt.lines():
            print(line, flush=True)
    return 0


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError("give 1 to 1024")
    return value


def register(sub: Any, with_config: Any, *, arguments: bool) -> None:
    """`mongogate erase`; with `arguments`, its options too (they import the erasure package)."""
    e = with_config(
        sub.add_parser(
            "erase",
            help="remove every document of a tenant (or of one subject of it), redact its audit "
            "events, print a receipt",
        )
    )
    if arguments:
        add_arguments(e)


def add_arguments(e: Any) -> None:
    from mongogate.erasure import BATCH

    e.add_argument("--tenant", required=True, help="the tenant whose documents are removed")
    e.add_argument(
        "--subject",
        help="only this subject's documents within the tenant (its own memories and conversations; "
        "its name taken off what it wrote for the tenant and off audit events)",
    )
    e.add_argument("--json", action="store_true", help="the receipt as one JSON document")
    e.add_argument(
        "--batch-size",
        type=_batch_size,
        default=BATCH,
        help=f"documents per read and write (default {BATCH})",
    )
    e.set_defaults(func=cmd_erase)
