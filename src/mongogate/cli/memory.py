"""`mongogate memory reembed [--dry-run] [--batch-size N] [--json]`: long-term memory maintenance.

`reembed` gives every memory a vector from the configured `[memory.embedding]` model (after a
model change, or for memories stored without one), resumable and idempotent: run it again
after an interruption and it goes on with what is left. It can run while mongogate serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from mongogate.cli.common import settings_from
from mongogate.config import Settings


async def _run(settings: Settings, args: argparse.Namespace) -> list[str]:
    from mongogate.db import Database
    from mongogate.recall.embedding import make_embedder
    from mongogate.recall.reembed import reembed, stale_counts

    embedder = make_embedder(settings.memory.embedding)
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        if args.dry_run:
            counts = await stale_counts(db.memory, embedder.model)
            if args.json:
                return [json.dumps({"model": embedder.model, "stale": counts})]
            total = sum(counts.values())
            lines = [f"{total} memories to re-embed with {embedder.model}"]
            lines += [f"  {n} embedded by {model}" for model, n in sorted(counts.items())]
            return lines
        report = await reembed(db.memory, embedder, batch_size=args.batch_size)
        if args.json:
            return [json.dumps(report.__dict__)]
        return report.lines()
    finally:
        await db.close()


def cmd_memory(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    for line in asyncio.run(_run(settings, args)):
        print(line, flush=True)
    return 0


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 2048:
        raise argparse.ArgumentTypeError("give 1 to 2048")
    return value


def register(sub: Any, with_config: Any) -> None:
    m = with_config(sub.add_parser("memory", help="long-term memory maintenance: reembed"))
    m.add_argument(
        "action",
        choices=("reembed",),
        help="reembed: new vectors for memories not embedded by the configured model (resumable)",
    )
    m.add_argument("--dry-run", action="store_true", help="only count what would be re-embedded, per model")
    m.add_argument("--batch-size", type=_batch_size, default=64, help="memories per read and write (64)")
    m.add_argument("--json", action="store_true", help="one JSON line instead of text")
    m.set_defaults(func=cmd_memory)
