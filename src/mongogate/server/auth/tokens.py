"""Development tokens: mint an HS256 JWT that this server's own JwtVerifier accepts.

For local testing only (``mongogate token --tenant T``); production tokens come from an
identity provider. The token is returned, never logged.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import jwt

from mongogate.config import AuthSettings
from mongogate.errors import ConfigError
from mongogate.server.auth.signing_keys import hs256_secret_bytes

_TTL = re.compile(r"\s*(\d+)\s*([smhd]?)\s*", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> int:
    """Seconds in "90s", "30m", "1h", "2d" (or bare seconds); ValueError says what is accepted."""
    m = _TTL.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid duration {text!r}: use a number with s, m, h or d (e.g. 90s, 30m, 1h, 2d)")
    seconds = int(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: it must be longer than zero")
    return seconds


def mint_dev_token(
    auth: AuthSettings,
    *,
    tenant: str,
    ttl_s: int = 3600,
    subject: str = "dev",
    scopes: Sequence[str] = (),
) -> str:
    """An HS256 token for ``tenant`` signed with ``auth.jwt_secret``, with iss/aud when configured.

    Only HS256: minting needs the signing key, and for RS/ES the server holds only the public key.
    """
    if auth.mode != "jwt" or auth.jwt_secret is None:
        raise ConfigError(
            "minting a development token needs auth.mode = 'jwt' with auth.jwt_secret (HS256) "
            f"(this configuration has mode {auth.mode!r}"
            + (" and no jwt_secret)" if auth.jwt_secret is None else ")")
            + "; with a public key or JWKS, get tokens from the identity provider that holds the private key"
        )
    secret = hs256_secret_bytes(auth)
    if not tenant or tenant.strip() != tenant:
        raise ValueError(f"invalid tenant {tenant!r}: it must be non-empty, without surrounding spaces")
    if any(not s or s.split() != [s] for s in scopes):
        raise ValueError(f"invalid scopes {list(scopes)!r}: each must be non-empty and without spaces")
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be positive, got {ttl_s}")
    if ttl_s > auth.max_token_lifetime_s:
        raise ValueError(
            f"a token living {ttl_s} s would be refused by this server: auth.max_token_lifetime_s is "
            f"{auth.max_token_lifetime_s} s; ask for a shorter ttl"
        )
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": subject,
        auth.tenant_claim: tenant,
        "iat": now,
        "nbf": now,
        "exp": now + ttl_s,
    }
    if scopes:
        claims["scope"] = " ".join(scopes)
    if auth.issuer is not None:
        claims["iss"] = auth.issuer
    if auth.audience is not None:
        claims["aud"] = auth.audience
    return jwt.encode(claims, secret, algorithm="HS256")
