"""The package installs the way MCP servers are installed: build, install the wheel alone, launch it;
and every install line of the README and the docs runs as written.

`python -m build` makes an sdist and a wheel; the wheel goes into a fresh virtual environment
(`pip install 'mongogate-*.whl[embedded]'`, no editable install, nothing of the checkout on
sys.path); its `mongogate` answers `--version` and serves a tool call over stdio. mongogate is on
no package index, so the documented lines install from a clone (this checkout stands for
`/path/to/mongogate`): the wheel, the directory with extras (pip), and `uvx --from` a wheel, a
directory and a git URL (the locked uv of this environment). Reuses pip's and
uv's caches; deselect with `-m 'not install'`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from mongogate import __version__
from tests.helpers import ROOT

pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.embedded_engine]


def sh(args: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{args}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_the_checkout_tracks_no_virtual_environment() -> None:
    """A `.venv` in git (a worktree's link to a shared venv was committed once) replaces a
    checkout's own venv on merge and makes `make setup` fail on a fresh clone (a link to itself)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed copy)")
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--", ".venv", ".venv/*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked == []


#: the pages whose install lines must run (the README, the docs, the examples)
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "examples").rglob("*.md"),
        *(ROOT / "examples").rglob("*.py"),
    ]
)
#: every install line they show, in the order a user runs them, and what it must print
DOCUMENTED: dict[str, str] = {
    ".venv/bin/python -m build": "Successfully built",
    "python3.13 -m venv ~/mongogate && ~/mongogate/bin/pip install "
    "'dist/mongogate-0.1.0-py3-none-any.whl[embedded]'": "Successfully installed",
    "~/mongogate/bin/mongogate --version": f"mongogate {__version__}",
    "~/mongogate/bin/pip install '/path/to/mongogate[embedded,langgraph,openai-agents]'": (
        "Successfully installed"
    ),
    "uvx --python 3.13 --from 'mongogate[embedded] @ file:///path/to/mongogate-0.1.0-py3-none-any.whl' "
    "mongogate --version": f"mongogate {__version__}",
    "uvx --python 3.13 --from 'mongogate[embedded] @ file:///path/to/mongogate' mongogate --version": (
        f"mongogate {__version__}"
    ),
    "uvx --python 3.13 --from 'mongogate[embedded] @ git+file:///path/to/mongogate' mongogate --version": (
        f"mongogate {__version__}"
    ),
}
INSTALLS = re.compile(r"pip install|\buvx --|-m build\b|~/mongogate/bin/")
#: named in prose as a term, not a command to run
TERMS = {"uvx --from"}


def documented_lines() -> list[str]:
    """The install commands of the pages: code-block lines and inline code (comments cut)."""
    found: list[str] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        prose = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
        lines = [line.split("  #")[0].strip() for b in blocks for line in b.splitlines()]
        lines += [line.split("  #")[0].strip() for line in text.splitlines() if line.startswith("    ")]
        spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        found += [
            c for c in (*lines, *spans) if INSTALLS.search(c) and c not in TERMS and not c.startswith("#")
        ]
    return list(dict.fromkeys(found))


def test_every_documented_install_line_is_known_here() -> None:
    """A new install line in a page needs a place in DOCUMENTED (so the next test runs it); the
    old `pip install 'mongogate[langgraph]'` lines failed: mongogate is on no index."""
    assert set(documented_lines()) == set(DOCUMENTED)


def uv_tool(tmp: Path) -> Path:
    """The locked uv of this environment (requirements/test.txt), alone on a PATH entry: the
    environment's own python must not leak into the lines under test."""
    bin_dir = tmp / "uv-bin"
    bin_dir.mkdir()
    for name in ("uv", "uvx"):
        (bin_dir / name).symlink_to(Path(sys.executable).with_name(name))
    return bin_dir


async def serves_over_stdio(exe: Path, tmp_path: Path) -> None:
    """The installed `mongogate` serves the demo's `find_orders` over stdio, from elsewhere."""
    params = StdioServerParameters(
        command=str(exe),
        args=["serve", "--demo"],
        env={"MONGOGATE_AUTH__TENANT": "acme", "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data")},
        cwd=str(tmp_path),
    )
    async with Client(params) as c:
        r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 2})
        assert not r.is_error, r.content
        docs = (r.structured_content or {})["documents"]
        assert len(docs) == 2 and all(d["number"].startswith("AC-") for d in docs)


@pytest.mark.anyio
@pytest.mark.timeout(900)  # a build, two environments, uv's resolution: minutes on a loaded machine
async def test_every_documented_install_line_runs_and_the_wheel_serves_alone(tmp_path: Path) -> None:
    # Nothing of the checkout may leak in: no PYTHONPATH, no MONGOGATE_* settings, a cwd outside it.
    home = tmp_path / "home"
    home.mkdir()
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve().parent  # has python3.13
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MONGOGATE_", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(uv_tool(tmp_path)), str(base), env.get("PATH", "/usr/bin:/bin")]),
        "UV_CACHE_DIR": str(Path(sys.prefix) / "uv-cache"),  # kept between runs, like pip's
        "UV_PYTHON_DOWNLOADS": "never",
    }
    assert shutil.which("python3.13", path=env["PATH"]), "the documented venv line needs python3.13"
    venv = home / "mongogate"
    wheel = tmp_path / "dist" / f"mongogate-{__version__}-py3-none-any.whl"
    for line in DOCUMENTED:
        command = line
        if line == ".venv/bin/python -m build":  # into ./dist of this test, not the checkout's
            command = f"{shlex.quote(sys.executable)} -m build --outdir dist {shlex.quote(str(ROOT))}"
        elif "/path/to/mongogate[" in line:  # the wheel's install, alone, first: it serves
            where = sh(
                [venv / "bin" / "python", "-c", "import mongogate; print(mongogate.__file__)"], tmp_path, env
            )
            assert Path(where.strip()).is_relative_to(venv), where  # the installed copy, not the checkout
            await serves_over_stdio(venv / "bin" / "mongogate", tmp_path)
        command = command.replace("/path/to/mongogate-0.1.0-py3-none-any.whl", str(wheel))
        command = command.replace("/path/to/mongogate", str(ROOT))
        r = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, f"{line}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        assert DOCUMENTED[line] in r.stdout + r.stderr, f"{line}\n{r.stdout[-2000:]}"
        if line == ".venv/bin/python -m build":
            assert wheel.is_file() and (tmp_path / "dist" / f"mongogate-{__version__}.tar.gz").is_file()
    # the extras the directory install named are there, in the installed copy
    imports = "import mongogate.langgraph, mongogate.openai_agents, mongoeco; print(mongogate.__file__)"
    where = sh([venv / "bin" / "python", "-c", imports], tmp_path, env)
    assert Path(where.strip()).is_relative_to(venv), where
