"""Write one benchmark's section of RESULTS.md, leaving the other benchmarks' sections alone."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"


def write_section(name: str, body: str, path: Path = RESULTS) -> None:
    """Replace only the ``## <name>`` section (append it if missing)."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    heading = f"## {name}"
    section = f"{heading}\n\n{body}"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        rest = "".join(lines[end:])
        text = "".join(lines[:start]) + section + ("\n" + rest if rest else "")
    path.write_text(text, encoding="utf-8")


def command_line(script: str, argv: list[str] | None) -> str:
    """How a run was started, as RESULTS.md shows it: ``python benchmarks/<script> <args>``."""
    args = argv if argv is not None else sys.argv[1:]
    return f"python benchmarks/{script}" + "".join(f" {shlex.quote(a)}" for a in args)


def publish(name: str, body: str, write: bool, path: Path = RESULTS) -> None:
    """Print ``body``; with ``write``, also make it the ``## <name>`` section of RESULTS.md."""
    print(body)
    if write:
        write_section(name, body, path)
        print(f"written to {path} (## {name})")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's argument parser, with the ``--no-write`` every benchmark takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    return p
