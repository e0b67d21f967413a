"""`make lock`: resolve requirements/run.txt and requirements/test.txt from pyproject.toml.

Both are universal locks (every Python the Makefile may pick, 3.13 and newer, and the 3.11+ the
package supports), every package pinned with its hashes. `make run` installs run.txt (the server
and the embedded engine); `make test` installs test.txt (every extra). run.txt is resolved with
test.txt's versions as constraints, so moving from one to the other changes no version.

requirements/uv.txt is uv's own pin from test.txt: the Makefile installs it with pip, then uv
installs a lock (about 8x faster than pip on a cold cache; docs/decisions/dependency-lock.md).

Each lock's first line records a digest of the inputs (the dependencies, every extra and the build
requirements of pyproject.toml): tests/test_lock.py fails when pyproject.toml changed and the
lock did not. Existing pins are kept unless asked: `UPGRADE=1` re-resolves everything to the
newest allowed, `UPGRADE=name[,name]` only those packages. The versions that moved are printed,
and for each package whose internals `mongogate.compat` wraps, the wrapper to re-read.
(docs/decisions/dependency-lock.md; docs/development.md, "Bumping a dependency".)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PYPROJECT = ROOT / "pyproject.toml"
RUN = HERE / "run.txt"
TEST = HERE / "test.txt"
UV = HERE / "uv.txt"  # the installer itself, taken from test.txt: pip installs it, it installs the rest
RUN_EXTRAS = ("embedded",)
DIGEST_PREFIX = "# inputs: sha256:"
HEADER = (
    "{prefix}{digest} (pyproject.toml's dependencies, extras and build requirements)\n"
    "# Written by `make lock` (requirements/lock.py); do not edit by hand.\n"
)


@dataclass(frozen=True)
class Pin:
    """One locked package: its version and the environment marker it applies under ("" = all)."""

    version: str
    marker: str


def inputs_digest(pyproject: Path = PYPROJECT) -> str:
    """What a lock was resolved from: a change to any of these makes every lock stale."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    inputs = {
        "requires-python": project.get("requires-python", ""),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
        "build-system": data.get("build-system", {}).get("requires", []),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock: Path) -> str:
    """The digest a lock was written with ("" when it has none)."""
    first = lock.read_text().splitlines()[0] if lock.exists() else ""
    return first.removeprefix(DIGEST_PREFIX).split(" ", 1)[0] if first.startswith(DIGEST_PREFIX) else ""


def read_lock(lock: Path) -> dict[tuple[str, str], Pin]:
    """Every `name==version ; marker` line of a lock, keyed by (normalized name, marker)."""
    pins: dict[tuple[str, str], Pin] = {}
    for line in lock.read_text().splitlines():
        if not line or line[0] in "# " or "==" not in line:
            continue
        spec = line.split(" \\", 1)[0].strip()
        requirement, _, marker = spec.partition(" ; ")
        name, _, version = requirement.partition("==")
        key = (normalize(name.split("[", 1)[0]), marker.strip())
        pins[key] = Pin(version.strip(), marker.strip())
    return pins


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _all_extras() -> list[str]:
    return sorted(tomllib.loads(PYPROJECT.read_text())["project"].get("optional-dependencies", {}))


def _uv() -> str:
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        raise SystemExit("make lock needs uv in the virtual environment: run `make setup` first")
    return str(uv)


def _compile(out: Path, extras: list[str], upgrade: str, constraints: Path | None) -> None:
    build = tomllib.loads(PYPROJECT.read_text()).get("build-system", {}).get("requires", [])
    with tempfile.TemporaryDirectory() as tmp:
        build_in = Path(tmp) / "build-requirements.in"
        build_in.write_text("".join(f"{r}\n" for r in build))
        cmd = [_uv(), "pip", "compile", "--quiet", "--universal", "--generate-hashes"]
        cmd += ["--python-version", "3.13"]  # the oldest Python the Makefile picks (the embedded engine)
        cmd += ["--custom-compile-command", "make lock", "--no-header", "--annotation-style", "line"]
        cmd += [arg for extra in extras for arg in ("--extra", extra)]
        if upgrade == "1":
            cmd.append("--upgrade")
        elif upgrade:
            cmd += [arg for name in upgrade.split(",") for arg in ("--upgrade-package", name.strip())]
        if constraints is not None:
            cmd += ["--constraint", str(constraints)]
        body = Path(tmp) / out.name
        if out.exists():  # uv keeps the pins of the file it writes to unless asked to upgrade
            body.write_text(out.read_text())
        cmd += ["pyproject.toml", str(build_in), "--output-file", str(body)]
        subprocess.run(cmd, cwd=ROOT, check=True)
        text = body.read_text().replace(str(build_in), "build-system.requires")
        if constraints is not None:
            text = text.replace(f"-c {constraints}", "test.txt's pins")
    out.write_text(HEADER.format(prefix=DIGEST_PREFIX, digest=inputs_digest()) + text)


def _constraints_of(lock: Path, dest: Path) -> Path:
    """A lock's pins without hashes: what `uv pip compile --constraint` takes."""
    lines = [
        f"{name}=={pin.version}" + (f" ; {pin.marker}" if pin.marker else "")
        for (name, _), pin in read_lock(lock).items()
    ]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def _installer_block(lock: Path) -> str:
    """uv's own lines of a lock (its pin and hashes, no annotation)."""
    kept, inside = [], False
    for line in lock.read_text().splitlines():
        if not line.startswith(" "):
            inside = line.startswith("uv==")
        if inside and "# via" not in line:
            kept.append(line)
    if not kept:
        raise SystemExit("requirements/test.txt has no uv: the dev extra names it (make lock's resolver)")
    return "\n".join(kept) + "\n"


def _changes(before: dict[tuple[str, str], Pin], after: dict[tuple[str, str], Pin]) -> list[str]:
    names = sorted({k for k in before} | {k for k in after})
    out = []
    for key in names:
        old, new = before.get(key), after.get(key)
        if old != new:
            shown = key[0] + (f" ; {key[1]}" if key[1] else "")
            out.append(f"  {shown}: {old.version if old else '-'} -> {new.version if new else '-'}")
    return out


def _wrapped() -> dict[str, str]:
    """{package: compat wrapper} (mongogate.compat.WRAPPED), read without importing mongogate."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from mongogate.compat import WRAPPED
    finally:
        sys.path.pop(0)
    return {normalize(name): wrapper for name, (wrapper, _) in WRAPPED.items()}


def main() -> int:
    upgrade = os.environ.get("UPGRADE", "")
    before = read_lock(TEST) if TEST.exists() else {}
    _compile(TEST, _all_extras(), upgrade, None)
    with tempfile.TemporaryDirectory() as tmp:
        _compile(RUN, list(RUN_EXTRAS), "", _constraints_of(TEST, Path(tmp) / "test-pins.txt"))
    UV.write_text(HEADER.format(prefix=DIGEST_PREFIX, digest=inputs_digest()) + _installer_block(TEST))
    after = read_lock(TEST)
    changes = _changes(before, after)
    print("requirements/test.txt:", "no version changed" if not changes else f"{len(changes)} changed")
    print("\n".join(changes))
    wrapped = _wrapped()
    keys = set(before) | set(after)
    moved = sorted({key[0] for key in keys if key[0] in wrapped and before.get(key) != after.get(key)})
    for name in moved:
        print(f"re-read src/mongogate/compat/{wrapped[name]} against {name}'s new source, then move its pin")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
