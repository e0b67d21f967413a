"""The HS256 secret checked without PyJWT, so a server in mode 'jwt' with `auth.jwt_secret` (what
`make run` serves) starts without importing PyJWT and cryptography (about 45 ms of its start-up,
benchmarks/RESULTS.md "Start-up"): the verifier itself is built at the first token
(`deferred.DeferredJwtVerifier`).

The check refuses at least what PyJWT's `HMACAlgorithm.prepare_key` refuses (a PEM block or an
SSH public key used as an HMAC secret: the algorithm-confusion trap), and more: any PEM `BEGIN`
marker, whether or not an `END` follows, and any text starting like an SSH key. PyJWT's own check
still runs when the verifier is built (`signing_keys.hs256_secret_bytes`), and a test holds the
two together (tests/server/test_auth_tokens.py).
"""

from __future__ import annotations

import re

from mongogate.config import AuthSettings
from mongogate.errors import ConfigError

__all__ = ["MIN_HS256_SECRET_BYTES", "public_key_as_secret", "secret_bytes"]

#: RFC 7518 §3.2: an HS256 key must be at least as long as the hash output.
MIN_HS256_SECRET_BYTES = 32
_GENERATE_SECRET_HINT = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"
#: a PEM marker of any label (PyJWT's needs a known label and a matching END)
_PEM_BEGIN = re.compile(rb"----[- ]BEGIN ")
#: PyJWT's SSH key prefixes (`jwt.utils._SSH_KEY_FORMATS`) and any other `ssh-`/`ecdsa-`/`sk-` one
_SSH_PREFIXES = (b"ssh-", b"ecdsa-", b"sk-ssh-", b"sk-ecdsa-")


def secret_bytes(auth: AuthSettings) -> bytes:
    """The configured HS256 secret, refused when too short or when it looks like a public key."""
    if auth.jwt_secret is None:
        raise ConfigError("auth.jwt_secret is not set; HS256 needs a shared secret of at least 32 bytes")
    secret = auth.jwt_secret.get_secret_value().encode("utf-8")
    if len(secret) < MIN_HS256_SECRET_BYTES:
        raise ConfigError(
            f"auth.jwt_secret is {len(secret)} bytes; HS256 needs at least {MIN_HS256_SECRET_BYTES} "
            f"random bytes (RFC 7518 §3.2). Set auth.jwt_secret or MONGOGATE_AUTH__JWT_SECRET; "
            f"{_GENERATE_SECRET_HINT}"
        )
    if _PEM_BEGIN.search(secret) or secret.startswith(_SSH_PREFIXES):
        raise ConfigError(public_key_as_secret())
    return secret


def public_key_as_secret() -> str:
    return (
        "auth.jwt_secret looks like a public key; for RS256/ES256 set auth.jwt_public_key_file "
        "to the PEM file instead of putting the key in jwt_secret"
    )
