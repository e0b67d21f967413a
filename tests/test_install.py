"""The package installs the way MCP servers are installed: build, install the wheel alone, launch it.

`python -m build` makes an sdist and a wheel; the wheel goes into a fresh virtual environment
(`pip install 'mongogate-*.whl[embedded]'`, no editable install, nothing of the checkout on
sys.path); its `mongogate` answers `--version` and serves a tool call over stdio. Reuses pip's
cache; deselect with `-m 'not install'`.
"""

from __future__ import annotations

import os
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


@pytest.mark.anyio
@pytest.mark.timeout(600)  # a build and an install on a loaded machine; about 60 s on a quiet one
async def test_wheel_installs_alone_and_serves_over_stdio(tmp_path: Path) -> None:
    # Nothing of the checkout may leak in: no PYTHONPATH, no MONGOGATE_* settings, and a cwd outside it.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MONGOGATE_", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    dist = tmp_path / "dist"
    sh([sys.executable, "-m", "build", "--outdir", dist, ROOT], tmp_path, env)
    wheels = sorted(dist.glob(f"mongogate-{__version__}-*.whl"))
    sdists = sorted(dist.glob(f"mongogate-{__version__}.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(dist.iterdir())

    venv = tmp_path / "venv"
    sh([sys.executable, "-m", "venv", venv], tmp_path, env)  # Python >= 3.13: the embedded extra needs it
    py, exe = venv / "bin" / "python", venv / "bin" / "mongogate"
    sh([py, "-m", "pip", "install", "-q", f"{wheels[0]}[embedded]"], tmp_path, env)

    where = sh([py, "-c", "import mongogate; print(mongogate.__file__)"], tmp_path, env).strip()
    assert Path(where).is_relative_to(venv), where  # the installed copy, not the checkout
    assert sh([exe, "--version"], tmp_path, env).strip() == f"mongogate {__version__}"

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
