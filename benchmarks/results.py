"""Write one benchmark's section of RESULTS.md, leaving the other benchmarks' sections alone."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


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
