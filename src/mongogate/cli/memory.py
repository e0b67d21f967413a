"""`mongogate memory reembed | import | export`: long-term memory maintenance and bulk moves.

`reembed` gives every memory a vector from the configured `[memory.embedding]` model (after a
model change, or for memories stored without one), resumable and idempotent: run it again
after an interruption and it goes on with what is left. It can run while mongogate serves.

`import FILE.jsonl --tenant T [--subject S]` stores one memory a line (`recall/bulk.py`), idempotent
by key (a second run is all `unchanged`); bad lines are reported by number on stderr, the counts at
the end; a progress bar on stderr when it is a terminal. `export FILE.jsonl` writes the same format
(`-` for stdout). Long-term memory is built by `assembly.long_term_memory`, as the server builds it.

The scope is the one callers read (`memory.long_term.scope`): `--subject` is required where every
memory is a subject's ("subject") and refused where callers read the tenant's ("tenant"), since
an import into the other scope is stored where no caller ever looks and an export of it is empty.

An export file holds every memory of a scope, so it is written to a new file beside the target
(`O_EXCL`, 0600) and renamed over it once whole: a reader of the old file (another local user
holding a descriptor, or one who created the file beforehand) never sees the export, and a path
that belongs to another user (or a directory other users could change, `safefs.py`) is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import stat
import sys
import time
from pathlib import Path
from typing import IO, Any

from mongogate.cli import INTERRUPTED
from mongogate.cli.common import settings_from
from mongogate.config import Settings
from mongogate.errors import ConfigError
from mongogate.safefs import open_dir


async def _run(settings: Settings, args: argparse.Namespace) -> tuple[list[str], int]:
    from mongogate.db import Database
    from mongogate.recall import make_embedder

    embedder = make_embedder(settings.memory.embedding)
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        if args.action == "reembed":
            return await _reembed(db, embedder, args), 0
        return await _bulk(settings, db, embedder, args)
    finally:
        await db.close()


async def _reembed(db: Any, embedder: Any, args: argparse.Namespace) -> list[str]:
    from mongogate.recall import reembed, stale_counts

    if args.dry_run:
        counts = await stale_counts(db.memory, embedder.model)
        if args.json:
            return [json.dumps({"model": embedder.model, "stale": counts})]
        total = sum(counts.values())
        lines = [f"{total} memories to re-embed with {embedder.model}"]
        lines += [f"  {n} embedded by {model}" for model, n in sorted(counts.items())]
        return lines
    report = await reembed(db.memory, embedder, batch_size=args.batch_size or 64)
    if args.json:
        return [json.dumps(report.__dict__)]
    return report.lines()


class Progress:
    """A one-line bar on stderr, redrawn at most ten times a second; silent off a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = max(total, 1)
        self.enabled = enabled
        self.done = 0
        self.started = time.monotonic()
        self.drawn = 0.0

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self.drawn >= 0.1 or self.done >= self.total):
            self.drawn = now
            share = min(self.done / self.total, 1.0)
            rate = self.done / max(now - self.started, 1e-9)
            bar = "#" * int(share * 30)
            sys.stderr.write(f"\r[{bar:<30}] {self.done}/{self.total} lines {rate:.0f}/s")
            sys.stderr.flush()

    def end(self) -> None:
        if self.enabled and self.done:
            sys.stderr.write("\n")
            sys.stderr.flush()


async def _bulk(
    settings: Settings, db: Any, embedder: Any, args: argparse.Namespace
) -> tuple[list[str], int]:
    from mongogate.assembly import long_term_memory
    from mongogate.recall import MemoryScope, scope_for

    if args.file is None or not args.tenant:
        raise ConfigError(f"memory {args.action} needs FILE (.jsonl) and --tenant T")
    check_scope(settings.memory.long_term.scope, args.action, args.subject)
    scope = (
        MemoryScope(args.tenant) if args.subject is None else scope_for("subject", args.tenant, args.subject)
    )
    store = long_term_memory(settings, db.memory, embedder=embedder)
    if args.action == "export":
        target = None if args.file == "-" else ExportFile(Path(args.file))  # refused before any read
        await store.ensure_indexes()
        return await _export(store, scope, args, target)
    await store.ensure_indexes()
    return await _import(store, scope, args)


async def _export(
    store: Any, scope: Any, args: argparse.Namespace, target: ExportFile | None
) -> tuple[list[str], int]:
    from mongogate.recall import export_lines

    count = 0
    out = sys.stdout if target is None else target.out
    try:
        async for line in export_lines(store, scope, namespace=args.namespace):
            out.write(line + "\n")
            count += 1
    except BaseException:
        if target is not None:
            target.abandon()
        raise
    if target is not None:
        target.commit()
    summary = {"exported": count}
    return [json.dumps(summary) if args.json else f"exported {count} memories"], 0


async def _import(store: Any, scope: Any, args: argparse.Namespace) -> tuple[list[str], int]:
    from mongogate.recall import (
        BATCH,
        IMPORT_AUTHOR,
        MAX_FILE_BYTES,
        import_lines,
        max_line_bytes,
        read_lines,
    )

    path = Path(args.file)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path} is {size} bytes; memory import reads at most {MAX_FILE_BYTES}")
    limit = max_line_bytes(store)
    with path.open("rb") as f:
        total = sum(1 for _ in read_lines(f, limit))
    progress = Progress(total, sys.stderr.isatty() and not args.json)
    started = time.monotonic()
    with path.open("rb") as f:
        report = await import_lines(
            store,
            scope,
            read_lines(f, limit),
            author=args.subject if args.subject is not None else IMPORT_AUTHOR,
            batch=args.batch_size or BATCH,
            progress=progress,
        )
    progress.end()
    seconds = time.monotonic() - started
    for number, why in report.bad:
        print(f"{path}:{number}: {why}", file=sys.stderr, flush=True)
    counts = report.counts()
    if args.json:
        lines = [json.dumps({**counts, "seconds": round(seconds, 3)})]
    else:
        rate = report.done / seconds if seconds > 0 else 0.0
        lines = [
            " ".join(f"{k} {v}" for k, v in counts.items())
            + f" ({report.done} memories in {seconds:.1f} s, {rate:.0f}/s)"
        ]
    return lines, 1 if report.bad else 0


def check_scope(configured: str, action: str, subject: str | None) -> None:
    """The scope asked for is the one callers read (`memory.long_term.scope`), or a ConfigError."""
    if configured == "subject" and subject is None:
        raise ConfigError(
            f"memory {action}: memory.long_term.scope is 'subject' (each caller reads only its own "
            "memories), so give --subject S, the subject whose memories these are; without it they "
            "would go to (or come from) a tenant-wide scope no caller of this configuration reads"
        )
    if configured == "tenant" and subject is not None:
        raise ConfigError(
            f"memory {action}: memory.long_term.scope is 'tenant' (callers read the tenant's "
            "memories, never a subject's), so drop --subject; a subject's scope is read only with "
            "memory.long_term.scope = 'subject'"
        )


class ExportFile:
    """The export, written to a new file beside its target and renamed over it once whole.

    Readable by its owner only (it holds every memory of a scope): a new file (``O_EXCL``,
    0600 whatever the umask) in the target's directory, reached through directories other users
    cannot change (`safefs.open_dir`), then renamed over the target. Whoever held the old file
    open (or made it beforehand to read what lands there) keeps the old contents; a target that
    belongs to another user, or is not a regular file or symlink, is refused before anything is
    read from the database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dir_fd = open_dir(path.parent, what="memory export", create=False, holds_files=False)
        try:
            self._check_target()
            self.temp = f".{path.name}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(self.temp, flags, 0o600, dir_fd=self.dir_fd)
            except OSError as e:
                raise ConfigError(f"cannot write the export beside {path}: {e.strerror}") from None
            os.fchmod(fd, 0o600)
            self.out: IO[str] = os.fdopen(fd, "w", encoding="utf-8")
        except BaseException:
            os.close(self.dir_fd)
            raise

    def _check_target(self) -> None:
        try:
            st = os.stat(self.path.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if st.st_uid != os.getuid():
            raise ConfigError(
                f"memory export: {self.path} belongs to another user (uid {st.st_uid}), who could read "
                "what is written there; choose a path of your own (nothing was exported)"
            )
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise ConfigError(f"memory export: {self.path} is not a regular file (nothing was exported)")

    def commit(self) -> None:
        """The whole export in place of the target (the rename is atomic)."""
        try:
            self.out.flush()
            os.fsync(self.out.fileno())
            self.out.close()
            self._check_target()  # still not another user's (a rename would not follow a link)
            os.rename(self.temp, self.path.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except BaseException:
            self.abandon()
            raise
        os.close(self.dir_fd)

    def abandon(self) -> None:
        """An export that failed: its new file removed, the target as it was."""
        if not self.out.closed:
            self.out.close()
        with contextlib.suppress(OSError):
            os.unlink(self.temp, dir_fd=self.dir_fd)
        os.close(self.dir_fd)


#: what an interrupted action leaves, and how to go on (each is safe to run again)
_INTERRUPTED = {
    "import": "the memories stored so far stay; run the same import again for the rest (idempotent by key)",
    "export": "nothing was written over the file (an export is renamed into place once whole); run it again",
    "reembed": "the memories re-embedded so far stay; run it again to go on with the rest",
}


def cmd_memory(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        # Ctrl-C: asyncio.run cancels the work (each `finally` runs: the database closes), then
        # raises KeyboardInterrupt here, once the loop is down: one line, not a traceback
        lines, code = asyncio.run(_run(settings, args))
    except KeyboardInterrupt:
        end_bar = "\n" if sys.stderr.isatty() else ""  # after a progress bar's last redraw
        print(
            f"{end_bar}mongogate: memory {args.action} interrupted: {_INTERRUPTED[args.action]}",
            file=sys.stderr,
        )
        return INTERRUPTED
    for line in lines:
        print(line, flush=True)
    return code


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 2048:
        raise argparse.ArgumentTypeError("give 1 to 2048")
    return value


def register(sub: Any, with_config: Any) -> None:
    m = with_config(
        sub.add_parser("memory", help="long-term memory maintenance and bulk moves: reembed, import, export")
    )
    m.add_argument(
        "action",
        choices=("reembed", "import", "export"),
        help="reembed: new vectors for memories not embedded by the configured model (resumable); "
        "import FILE.jsonl: one memory a line, idempotent by key; export FILE.jsonl: the same format",
    )
    m.add_argument("file", nargs="?", help="import/export: the JSON lines file (export: - for stdout)")
    m.add_argument("--tenant", help="import/export: the tenant whose memories these are")
    m.add_argument(
        "--subject",
        help="import/export: the subject's own scope (scope 'subject'); default: the tenant-wide scope",
    )
    m.add_argument("--namespace", help="export: only this namespace and the ones below it")
    m.add_argument("--dry-run", action="store_true", help="only count what would be re-embedded, per model")
    m.add_argument(
        "--batch-size", type=_batch_size, help="memories per read and write (reembed 64, import 256)"
    )
    m.add_argument("--json", action="store_true", help="one JSON line instead of text")
    m.set_defaults(func=cmd_memory)
