"""`mongogate engine start | stop | status [--uri] [--json]`: the embedded engine of a data directory.

Every other command starts the engine on demand; this one starts it ahead of time, stops it,
or shows where it is. `status --uri` prints the URI with the generated credentials, which only
the owner of the data directory can read (the credentials file is 0600).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from mongogate.cli.common import data_dir_line, settings_from
from mongogate.errors import ConfigError


def _lines(data_dir: Path) -> list[str]:
    from mongogate.engine import client

    state = client.status(data_dir)
    if state is None:
        return [f"engine: not running (data directory {data_dir})"]
    return [
        f"engine: running, pid {state.pid}, address {state.address}",
        f"data file: {state.data_file}",
        f"credentials: required ({state.auth}; user and password in {data_dir / 'engine.credentials'}, "
        "URI: mongogate engine status --uri)",
        f"idle stop: after {state.idle_stop_s:g} s with no client; started "
        + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.started_at)),
    ]


def _uri(data_dir: Path) -> str:
    from mongogate.engine import client

    if data_dir.exists() and data_dir.stat().st_uid != os.getuid():
        raise ConfigError(f"{data_dir} belongs to another user: only its owner may see the engine's URI")
    try:
        uri = client.owner_uri(data_dir)
    except OSError as e:
        raise ConfigError(f"cannot read the engine credentials in {data_dir}: {e.strerror}") from e
    if uri is None:
        raise ConfigError(f"the engine of {data_dir} is not running (start it: mongogate engine start)")
    return uri


def cmd_engine(args: argparse.Namespace) -> int:
    from mongogate.engine import client

    settings = settings_from(args)
    if settings.database.uri is not None:
        print("database.uri is set: this configuration does not use the embedded engine")
        return 0
    data_dir = settings.server.data_dir.resolve()
    where = data_dir_line(settings)
    if args.action == "start":
        lease = client.lease(data_dir, settings.database.engine_idle_stop_s)
        lease.release()
        print("\n".join([where, *_lines(data_dir)]))
        return 0
    if args.action == "stop":
        pid = client.status(data_dir)
        stopped = client.stop(data_dir)
        print(where)
        print(f"engine: stopped (pid {pid.pid})" if stopped and pid else "engine: was not running")
        return 0
    if args.uri:
        print(_uri(data_dir))
        return 0
    state = client.status(data_dir)
    if args.json:
        print(json.dumps({"running": state is not None, **(state.as_dict() if state else {})}))
    else:
        print("\n".join([where, *_lines(data_dir)]))
    return 0 if state is not None else 1


def register(sub: Any, with_config: Any) -> None:
    e = with_config(sub.add_parser("engine", help="start, stop or show the embedded engine of the data dir"))
    e.add_argument("action", choices=["start", "stop", "status"])
    e.add_argument("--uri", action="store_true", help="status: print the URI with credentials (owner only)")
    e.add_argument("--json", action="store_true", help="status: one JSON object")
    e.set_defaults(func=cmd_engine)
