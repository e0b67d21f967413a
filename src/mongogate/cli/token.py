"""`mongogate token`: mint a development JWT from the configured HS256 secret."""

from __future__ import annotations

import argparse
from typing import Any

from mongogate.cli.common import settings_from
from mongogate.errors import MongogateError


def cmd_token(args: argparse.Namespace) -> int:
    from mongogate.server.tokens import mint_dev_token, parse_ttl

    settings = settings_from(args)
    try:
        ttl = parse_ttl(args.ttl)
        token = mint_dev_token(
            settings.auth, tenant=args.tenant, ttl_s=ttl, subject=args.subject, scopes=args.scope
        )
    except ValueError as e:
        raise MongogateError(str(e)) from e
    print(token)
    return 0


def register(sub: Any, with_config: Any) -> None:
    k = with_config(sub.add_parser("token", help="mint a development JWT (HS256 secret from the config)"))
    k.add_argument("--tenant", required=True)
    k.add_argument("--ttl", default="1h")
    k.add_argument("--subject", default="dev")
    k.add_argument("--scope", action="append", default=[])
    k.set_defaults(func=cmd_token)
