"""Why a bearer credential was refused, for the log and for the client, without PyJWT.

`Reason` and `Rejected` are shared by the API-key and JWT verifiers; they live apart from the
JWT code (`server/auth/jwt_verifier.py`, `jwks.py`, `signing_keys.py`) so that a server that
verifies no JWT (stdio, API keys, no auth) never imports PyJWT and cryptography (about 45 ms
of its start, benchmarks/startup.py).
"""

from __future__ import annotations

import logging

from mongogate.server.auth.challenge import note_rejection

__all__ = ["Reason", "Rejected", "refused", "valid_tenant"]

logger = logging.getLogger("mongogate.server.auth.verify")


class Reason:
    """The reason classes a refused token is told (RFC 6750 ``error_description``): fixed texts,
    never token content, so a client learns what to fix and an attacker learns nothing more."""

    EXPIRED = "token expired"
    NOT_YET_VALID = "token not yet valid"
    BAD_SIGNATURE = "bad signature"
    WRONG_AUDIENCE = "wrong audience"
    WRONG_ISSUER = "wrong issuer"
    UNKNOWN_KEY = "unknown signing key"
    MALFORMED = "malformed token"
    ALGORITHM = "algorithm not allowed"
    CLAIMS = "missing or invalid claim"
    LIFETIME = "token lifetime too long"
    KEYS_UNAVAILABLE = "signing keys unavailable"
    UNKNOWN_API_KEY = "unknown API key"


class Rejected(Exception):
    """A token was refused. ``str(self)`` is the detail for the log; ``kind`` (a ``Reason``) is
    what the client is told. Neither ever quotes the token."""

    def __init__(self, kind: str, detail: str | None = None) -> None:
        super().__init__(detail or kind)
        self.kind = kind


def valid_tenant(value: object) -> str | None:
    """A tenant is a non-empty string without surrounding whitespace (" acme" must not pass as "acme")
    and without control characters (it is a data key and appears in every log line)."""
    if isinstance(value, str) and value and value.strip() == value and value.isprintable():
        return value
    return None


def refused(e: Exception) -> None:
    """Log why a token was refused and tell the HTTP challenge the reason class."""
    if isinstance(e, Rejected):
        logger.info("bearer token rejected: %s", e)
        note_rejection(e.kind)
    else:  # a parser surprise must deny (401), never answer 500
        logger.warning("bearer token rejected: unexpected %s while verifying it", type(e).__name__)
        note_rejection(Reason.MALFORMED)
