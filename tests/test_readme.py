"""Every command in the README, and in the docs pages the reference moved to, works as written
from the project directory.

The commands are extracted from the pages themselves (code blocks and inline code). Those that
finish on their own run here exactly as written (`.venv/bin/` is this interpreter's bin
directory; the environment only moves the data directory out of the checkout). Synopsis lines
are checked against the real argument parser. Servers, builds and `make` targets are run by the
tests named in COVERED. A command added to the README without a place here fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mongogate.cli import build_parser
from tests.helpers import ROOT

#: the README and the reference pages moved out of it (their commands are checked the same way)
PAGES = (
    "README.md",
    "docs/tools.md",
    "docs/query-tools.md",
    "docs/memory.md",
    "docs/clients.md",
    "docs/security.md",
    "docs/operations.md",
    "docs/embedded-engine.md",
    "docs/development.md",
    "docs/configuration.md",
)
README = "\n".join((ROOT / page).read_text(encoding="utf-8") for page in PAGES)
#: the README leads: at most this many lines, `make run` and `make test` on its first screen
MAX_README_LINES = 250
BIN = Path(sys.executable).parent
STARTS = ("make", "mongogate ", ".venv/bin/", "python", "uvx ", "MONGODB_URI=", "~/mongogate", "export ")

#: commands that finish on their own: run as written
RUN = {
    "mongogate --version": "mongogate ",
    ".venv/bin/mongogate token --tenant globex --ttl 1h": "eyJ",
    ".venv/bin/mongogate audit --config examples/mongogate.toml": '"rejected": 0',  # jsonl off a terminal
    "mongogate audit": '"summary"',
    ".venv/bin/mongogate token --tenant acme --sub alice": "eyJ",
    ".venv/bin/mongogate try find_orders --demo --tenant acme "
    '--args \'{"filter": {"status": "paid"}}\'': "allowed; the database receives:",
    **{
        f".venv/bin/mongogate client-config {client} --config examples/mongogate.toml --tenant acme --demo": (
            "/examples/mongogate.toml"
        )
        for client in ("claude-desktop", "cursor", "vscode", "claude-code", "inspector")
    },
    ".venv/bin/mongogate client-config inspector --http http://127.0.0.1:8000/mcp": "--transport http",
    "mongogate config-doc": "# Configuration",
}
#: commands that serve, build or take minutes, and the test (or person) that runs them
COVERED = {
    "make run": "tests/test_cli.py::test_serve_http_demo_runs_the_example_client (its exact serve command)",
    "make test": "the whole suite (run by the lead and CI)",
    "make lint": "make lint",
    "make soak": "the soak-marked tests (run by hand; README: not in CI)",
    "make test-serial": "make test, in one pytest process (tests/shards.py runs the halves)",
    ".venv/bin/python tests/shards.py -x": "make test (tests/shards.py is what it runs)",
    "make bench": "benchmarks/ (README: not in CI)",
    "MONGODB_URI=mongodb://... make test": "real MongoDB runs: a placeholder URI",
    ".venv/bin/python -m build": "tests/test_install.py",
    "python3.13 -m venv ~/mongogate && ~/mongogate/bin/pip install "
    "'dist/mongogate-0.1.0-py3-none-any.whl[embedded]'": "tests/test_install.py",
    "~/mongogate/bin/mongogate --version": "tests/test_install.py",
    "uvx --from": "prose: tests/test_install.py runs every documented uvx line (uv from PyPI)",
    "export MONGOGATE_TOKEN=...": "printed by make run: tests/test_cli.py reads it from the banner",
    ".venv/bin/python examples/http_client.py --url http://127.0.0.1:8000/mcp": "tests/test_cli.py",
    ".venv/bin/python examples/embed.py": "tests/test_examples.py",
    "mongogate worker --agents examples/agents.py:agents": "tests/test_examples.py (with --duration)",
    ".venv/bin/python -m pytest -m 'not install'": "the suite",
    ".venv/bin/python benchmarks/turn_soak.py": "README: a few minutes, not in CI",
    ".venv/bin/python benchmarks/redteam.py --quick": "tests/test_redteam_script.py (two of its attacks; "
    "the whole run by hand, recorded in benchmarks/RESULTS.md)",
    "mongogate check": "tests/test_cli.py and tests/tools/test_count.py (check against an engine)",
    "mongogate memory reembed": "tests/recall/test_reembed.py (the command line, against an engine)",
    "make setup": "the first step of make test and make run",
    "make lock": "by hand (it resolves against PyPI); tests/test_lock.py checks what it wrote",
    "make lock UPGRADE=uvicorn": "as make lock",
    "make lock UPGRADE=1": "as make lock",
    ".venv/bin/python examples/frameworks/pydantic_ai_agent.py": "tests/test_frameworks.py",
    "python -m mongogate.engine run --detach": "prose: what a mongogate process spawns; tests/test_engine.py",
    "mongogate engine start": "tests/test_engine.py",
    "mongogate engine status": "tests/test_engine.py",
    "mongogate engine stop": "tests/test_engine.py",
    "mongogate engine status --uri": "tests/test_engine.py",
    "mongogate schedule pause AGENT": "tests/scheduler/test_manage.py (the command line)",
    "mongogate schedule resume AGENT": "tests/scheduler/test_manage.py",
    "mongogate schedule run-now AGENT": "tests/scheduler/test_manage.py",
    "mongogate schedule remove AGENT": "tests/scheduler/test_manage.py",
    "mongogate schedule list": "tests/scheduler/test_manage.py (needs a database with schedules)",
    "mongogate schedule prune": "tests/scheduler/test_manage.py",
    "mongogate spec suggest --collection orders --tenant-field userId": "tests/test_spec_cli.py (a seeded "
    "collection, through the real command line)",
    ".venv/bin/mongogate spec suggest --config mongogate.toml --collection orders --tenant-field userId": (
        "a user's own file and collection: tests/test_spec_cli.py runs the same command line"
    ),
    ".venv/bin/mongogate check --config mongogate.toml": "a user's own file: tests/test_cli.py runs check",
    "export MONGOGATE_TOKEN=$(.venv/bin/mongogate token --tenant acme)": "test_quickstart_token_line",
    "mongogate client-config CLIENT": "synopsis: tests/test_cli_client_config.py runs every CLIENT",
    "mongogate engine start|stop|status": "tests/test_engine.py",
    ".venv/bin/python examples/long_term_memory.py": "tests/test_examples.py",
    ".venv/bin/python examples/long_conversation.py": "tests/test_examples.py (200 turns, flat context)",
    "mongogate memory export": "tests/recall/test_bulk.py (the command line, export then import)",
    "mongogate memory export FILE": "tests/test_cli_memory.py (a new file renamed into place)",
    "mongogate config-doc --output docs/configuration.md": "tests/test_config_doc.py (up to date)",
}


def readme_commands() -> list[str]:
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, re.S)
    prose = re.sub(r"```[a-z]*\n.*?```", "", README, flags=re.S)
    lines = [line.split("  #")[0].strip() for b in blocks for line in b.splitlines()]
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    found = [c for c in (*lines, *spans) if c.startswith(STARTS)]
    return list(dict.fromkeys(found))


def is_synopsis(command: str) -> bool:
    """A usage line: optional parts in brackets or placeholders in capitals (`--tenant T`)."""
    return "[" in command or re.search(r"\s[A-Z]\b", command) is not None


def test_every_readme_command_is_run_checked_or_covered() -> None:
    unplaced = [c for c in readme_commands() if c not in RUN and c not in COVERED and not is_synopsis(c)]
    assert unplaced == [], "add each to RUN (it finishes) or COVERED (the test that runs it)"
    assert set(RUN) | set(COVERED) <= set(readme_commands()), "RUN/COVERED name commands the README lost"


@pytest.mark.parametrize("command", sorted(RUN))
def test_command_runs_as_written(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)
    exe = argv[0].removeprefix(".venv/bin/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env["MONGOGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")  # keep the checkout clean
    r = subprocess.run(
        [str(BIN / exe), *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert RUN[command] in r.stdout


def subcommand_options() -> dict[str, set[str]]:
    parser = build_parser()
    subs = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    options = {"": {o for a in parser._actions for o in a.option_strings}}
    for name, sp in subs.items():  # type: ignore[union-attr]
        options[name] = {o for a in sp._actions for o in a.option_strings}
        for nested in sp._subparsers._group_actions[0].choices.values() if sp._subparsers else ():
            options[name] |= {o for a in nested._actions for o in a.option_strings}  # `schedule list ...`
    return options


def mongogate_args(command: str) -> list[str] | None:
    """The words after the `mongogate` executable in ``command`` (None: it does not run mongogate)."""
    words = command.split()
    for i, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "mongogate" and (
            words[i + 1].startswith("-") or words[i + 1].isalpha()
        ):
            return words[i + 1 :]
    return None


@pytest.mark.parametrize("command", [c for c in readme_commands() if mongogate_args(c) is not None])
def test_mongogate_flags_exist(command: str) -> None:
    """Every `mongogate` line (synopsis or example) names a real subcommand and real flags."""
    args = mongogate_args(command) or []
    sub = "" if args[0].startswith("-") else args[0]
    options = subcommand_options()
    assert sub in options, command
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", " ".join(args)))
    assert flags <= options[sub], f"{command}: unknown {sorted(flags - options[sub])}"


@pytest.mark.parametrize("command", [c for c in readme_commands() if c.startswith("make ")])
def test_make_targets_exist(command: str) -> None:
    target = command.split()[1]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{target}:", makefile, re.M), command
    if target == "run":  # what tests/test_cli.py starts (plus --port), so COVERED holds
        assert "mongogate serve --http --demo --config examples/mongogate.toml\n" in makefile


@pytest.mark.parametrize("command", [c for c in readme_commands() if re.search(r"\S+\.py\b", c)])
def test_scripts_named_exist(command: str) -> None:
    for path in re.findall(r"((?:examples|benchmarks)/\S+?\.py)", command):
        assert (ROOT / path).is_file(), command


def test_the_readme_leads() -> None:
    """At most 250 lines; `make run` and `make test` on the first screen; then the quickstart,
    the five clients, the tools and the recipes, in that order; the reference lives in docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= MAX_README_LINES, len(lines)
    first_screen = "\n".join(lines[:24])
    assert "make run" in first_screen and "make test" in first_screen
    heads = [line for line in lines if line.startswith("## ")]
    order = ["## Quickstart", "## Connect a client", "## Tools", "## Recipes"]
    assert [h for h in heads if h in order] == order, heads
    for client in ("claude-desktop", "cursor", "vscode", "claude-code", "inspector"):
        assert f"client-config {client}" in readme, client
    for recipe in (
        "Your own collection",
        "Long-term memory",
        "A scheduled agent",
        "LangGraph",
        "OpenAI Agents",
    ):
        assert f"**{recipe}" in readme or recipe in readme, recipe
    assert "docs/frameworks.md" in readme


def test_links_to_files_of_the_checkout_exist() -> None:
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            path = (ROOT / page).parent / target
            if path.name == "frameworks.md":  # written on the frameworks branch (LangGraph, OpenAI Agents)
                continue
            assert path.exists(), f"{page}: {target}"


def test_quickstart_token_line(tmp_path: Path) -> None:
    """The export line as pasted into bash from the project directory gives a JWT."""
    [line] = [c for c in readme_commands() if c.startswith("export MONGOGATE_TOKEN=$(")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env["MONGOGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")
    script = line.replace(".venv/bin/", f"{BIN}/") + '\necho "$MONGOGATE_TOKEN"'
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith("eyJ") and token.count(".") == 2, r.stdout
