"""`mongogate token`: mint a development JWT from the configured HS256 secret.

Without `--config` or `$MONGOGATE_CONFIG` it reads the first of `./mongogate.toml` and
`./examples/mongogate.toml` (what `make run` serves), so from the project directory the README's
`mongogate token --tenant T` mints a token the development server accepts.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from mongogate.cli.common import settings_from
from mongogate.errors import ConfigError, MongogateError

#: where `token` looks for the development server's config when none is given
DEFAULT_CONFIGS = (Path("mongogate.toml"), Path("examples") / "mongogate.toml")


def cmd_token(args: argparse.Namespace) -> int:
    from mongogate.server.auth.tokens import mint_dev_token, parse_ttl

    if args.config is None and not os.environ.get("MONGOGATE_CONFIG"):
        args.config = next((str(p) for p in DEFAULT_CONFIGS if p.is_file()), None)
    settings = settings_from(args)
    try:
        ttl = parse_ttl(args.ttl)
        token = mint_dev_token(
            settings.auth, tenant=args.tenant, ttl_s=ttl, subject=args.subject, scopes=args.scope
        )
    except ValueError as e:
        raise MongogateError(str(e)) from e
    except ConfigError as e:
        if args.config:
            raise ConfigError(f"{e} (config: {args.config})") from e
        raise ConfigError(
            f"{e}; no config file was given or found: pass --config F, set MONGOGATE_CONFIG, or run from "
            "a directory holding mongogate.toml or examples/mongogate.toml"
        ) from e
    print(token)
    return 0


def register(sub: Any, with_config: Any) -> None:
    k = with_config(sub.add_parser("token", help="mint a development JWT (HS256 secret from the config)"))
    k.add_argument("--tenant", required=True)
    k.add_argument("--ttl", default="1h")
    k.add_argument(
        "--sub",
        "--subject",
        dest="subject",
        default="dev",
        help="the token's subject (`sub`): the principal in audit events and logs (default: dev)",
    )
    k.add_argument("--scope", action="append", default=[])
    k.set_defaults(func=cmd_token)
