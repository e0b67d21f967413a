"""numpy is imported at its first use, never by `serve` before it answers (mongogate/lazy.py, issue 38.6).

Old code imported numpy (about 100 ms of CPU at load 2, benchmarks/startup.py) with the memory
and recall packages, so every `serve` paid it before answering `initialize`, `tools/list` or
`/readyz`; now recall, message search and the embedders import it when they first compute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mongogate.lazy import lazy
from tests.conftest import DEV_SECRET

#: run in a fresh interpreter: the CLI's parser, settings, both servers built, the services opened
SERVE = """
import json, sys, anyio
from mongogate.cli import build_parser
from mongogate.cli.common import registry_for
from mongogate.config import load_settings
from mongogate.server.app import build_server

build_parser(["serve"]).parse_args(["serve"])
uri, name, data, secret = sys.argv[1:]
base = {"database": {"uri": uri, "name": name}, "server": {"data_dir": data}}
stdio = load_settings(None, **base, auth={"mode": "none", "tenant": "acme"})
build_server(stdio, registry_for(stdio, False), transport="stdio")
http = load_settings(None, **base, auth={"mode": "jwt", "jwt_secret": secret})
server = build_server(http, registry_for(http, True), transport="http")
from mongogate.server.http import _config

_config(server, http.server, "127.0.0.1", 0).load()  # what uvicorn does before it serves
built = "numpy" in sys.modules
signing = sorted({"jwt", "cryptography.x509"} & set(sys.modules))
#: the websocket protocol (mongogate serves none), erasure declarations, memory import and export
unused = {"websockets", "mongogate.erasure", "mongogate.recall.bulk", "mongogate.recall.reembedding"}
unused = sorted(unused & set(sys.modules))
#: what runs a call, never a start: the policy walk, `spec`/`check`'s sampling, recall's rankers
called = {
    "mongogate.policy.execute",
    "mongogate.policy.aggregate_run",
    "mongogate.policy.sampling",
    "mongogate.recall.inprocess.ranker",
    "mongogate.recall.searchindex.ranker",
    # the in-process indexes (their rows, chains, ranking), message derivation, supersession,
    # history and expiry of long-term memory: a search, a write or a read of memory builds them
    "mongogate.indexing.entries",
    "mongogate.indexing.fusion",
    "mongogate.indexing.rows",
    "mongogate.indexing.scope_index",
    "mongogate.memory.message_fill",
    "mongogate.memory.message_index",
    "mongogate.memory.message_terms",
    "mongogate.recall.expiry",
    "mongogate.recall.history",
    "mongogate.recall.inprocess.chains",
    "mongogate.recall.inprocess.rows",
    "mongogate.recall.inprocess.scope_index",
    "mongogate.recall.on_version",
    "mongogate.recall.supersession",
    # mongogate's own tools: listed from their stored declarations, their modules loaded at the
    # first call of one of them (tools/stored_tools.py)
    "mongogate.tools.conversation_io",
    "mongogate.tools.memory_tools",
    "mongogate.tools.recall_common",
    "mongogate.tools.recall_query",
    "mongogate.tools.recall_reads",
    "mongogate.tools.recall_tools",
    "mongogate.tools.run_tools",
    "mongogate.tools.session_tools",
    "mongogate.tools.turn_io",
}
from mongogate.tools.base import ToolInput, ToolOutput

def models(base):
    for sub in base.__subclasses__():
        yield sub
        yield from models(sub)

#: tool I/O models whose core schema is built: at start each is only the key of its stored
#: schemas (tools/stored_schemas.py); the first validation or dump builds it
def built_models():
    every = [m for b in (ToolInput, ToolOutput) for m in models(b)]
    return sorted(m.__qualname__ for m in every if m.__pydantic_complete__)

async def open_them():
    from mongogate.assembly import no_caller, no_scope_check, open_services
    from mongogate.audit import audit_from_settings
    from mongogate.db import Database

    db = Database(http.database, http.server.data_dir)
    await db.open()
    audit = audit_from_settings(http, db.uri, "test")
    state = await open_services(
        http, db, audit=audit, principal=no_caller, require_scopes=no_scope_check, run_tools=True
    )
    await state.message_search.aclose()
    audit.close()
    await db.close()

anyio.run(open_them)
called = sorted(called & set(sys.modules))
defined = len(list(models(ToolOutput)))  # none: no tool module was imported
import mongogate.tools.memory_tools, mongogate.tools.recall_tools, mongogate.tools.run_tools  # a first call's
print(json.dumps({"defined": defined, "built": built, "opened": "numpy" in sys.modules, "signing": signing,
                  "unused": unused, "called": called, "models": built_models(),
                  "some": len(list(models(ToolOutput)))}))
"""


def test_serve_builds_and_opens_without_importing_numpy_or_pyjwt(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Old code: numpy was in sys.modules as soon as `mongogate.server.app` was imported, and
    PyJWT and cryptography.x509 (about 45 ms; the SDK imports the rest of cryptography) once an
    HTTP server with an HS256 secret was built; the secret is now checked at build without them
    (`server/auth/hs256.py`). Then (issue 38.6, fourth pass) uvicorn's websocket protocol with
    `websockets` (about 9 ms; uvicorn's default `ws="auto"`), the erasure declarations (every
    package's `ERASURE`) and long-term memory's import, export and re-embedding: none of them
    serves a call of a started server, and `erase`, `memory` and the scheduler import them.
    Then (fifth pass) the policy walk that runs a query call and the sampling of `spec`/`check`,
    recall's two rankers, and the core schemas of the tool I/O models (`defer_build`: their JSON
    schemas are stored, tools/stored_schemas.py): built at the first call, not at start. Then
    (sixth pass) the in-process indexes (`indexing/` entries, rows, fusion, scope_index; recall's
    rows, chains and scope index), message search's index and derivation (`MessageSearch.index`
    and `.fill` made at first use), supersession, history and expiry of long-term memory; and
    mongogate's own tools' modules, listed from their stored declarations (tools/stored_tools.py):
    no tool model is even defined at start, and once a first call imports them, none is built."""
    run = subprocess.run(
        [sys.executable, "-c", SERVE, engine_uri, db_name, str(tmp_path / "data"), DEV_SECRET],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found.pop("some") > 10  # once the tool modules are imported, the walk sees their models
    assert found == {
        "defined": 0,
        "built": False,
        "opened": False,
        "signing": [],
        "unused": [],
        "called": [],
        "models": [],
    }


def test_a_lazy_module_is_imported_at_its_first_attribute_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mg_lazy_probe.py").write_text("LOADS = []\nLOADS.append(1)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mg_lazy_probe", raising=False)
    probe = lazy("mg_lazy_probe")
    assert "mg_lazy_probe" not in sys.modules
    assert probe.VALUE == 42
    module = sys.modules["mg_lazy_probe"]
    assert probe.LOADS is module.LOADS == [1]  # imported once, its own objects
    assert "VALUE" in vars(probe)  # later reads are plain attribute reads
    setattr(module, "LATER", "added after")  # noqa: B010
    assert probe.LATER == "added after"  # a name the module gains later is still found
    with pytest.raises(AttributeError):
        _ = probe.MISSING


#: in a fresh interpreter: two threads read every name of the packages' `__all__` at once, the
#: lazily exported ones (`lazy.lazy_exports`) imported by whichever thread reads first
EXPORTS = """
import importlib, json, sys, threading
from mongogate.recall import _LAZY

from mongogate.policy import _LAZY as _POLICY
from mongogate.indexing import _LAZY as _INDEXING

lazy = {f"mongogate.{p}": {"ERASURE": f"mongogate.{p}.erase"} for p in ("audit", "memory", "runs")}
lazy["mongogate.recall"] = dict(_LAZY)
lazy["mongogate.policy"] = dict(_POLICY)
lazy["mongogate.indexing"] = dict(_INDEXING)
packages = {p: importlib.import_module(p) for p in lazy}
before = sorted({m for names in lazy.values() for m in names.values()} & set(sys.modules))
start = threading.Barrier(2)
read = [{}, {}]

def reader(i):
    start.wait()
    for p, package in packages.items():
        for name in package.__all__:
            read[i][p + "." + name] = getattr(package, name)

threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
star = {}
for p in packages:
    exec(f"from {p} import *", star)
print(json.dumps({
    "before": before,
    "read": [len(r) for r in read],
    "differ": sorted(k for k in read[0] if read[0][k] is not read[1].get(k)),
    "not_theirs": sorted(
        f"{p}.{n}" for p, names in lazy.items() for n, m in names.items()
        if read[0][f"{p}.{n}"] is not getattr(sys.modules[m], n)
    ),
    "star_missing": sorted(n for p in packages for n in packages[p].__all__ if n not in star),
}))
"""


def test_every_lazy_export_read_from_two_threads_at_once_is_the_defining_modules_object() -> None:
    """The erasure declarations, memory import/export/re-embedding, the policy walk and sampling,
    the indexes' ranking (`mongogate.indexing`): not imported with their package, then every name
    of `__all__` reads (and star-imports) as the object its module defines, the same from two
    threads that first read them at once."""
    run = subprocess.run([sys.executable, "-c", EXPORTS], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["before"] == []
    assert found["read"][0] == found["read"][1] > 100
    assert found["differ"] == found["not_theirs"] == found["star_missing"] == []
