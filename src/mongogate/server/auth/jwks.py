"""Where JWT verification keys come from: fixed keys (secret, PEM, JWKS file) or a JWKS URL.

A JWKS URL is how identity providers (Auth0, Okta, Keycloak, Entra) publish their rotating
keys. The set is fetched when first needed, used for ``auth.jwks_cache_s``, and fetched again
early when a token names a ``kid`` the cache does not hold. Every fetch, whatever caused it,
waits ``auth.jwks_refresh_interval_s`` after the previous one (on the injectable clock), so a
flood of tokens with random ``kid``s costs the provider at most one request per interval.
Each key keeps the one algorithm it was published for: a token never chooses it.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import jwt

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.errors import ConfigError
from mongogate.server.auth.reasons import Reason, Rejected
from mongogate.server.auth.signing_keys import Key, parse_jwks

__all__ = [
    "MAX_JWKS_BYTES",
    "KeySource",
    "Reason",
    "Rejected",
    "RemoteJwks",
    "StaticKeys",
    "reason_of",
]

log = logging.getLogger(__name__)

#: A key set larger than this is refused (a provider publishes a few keys, a few KB).
MAX_JWKS_BYTES = 1024 * 1024


#: PyJWT's failures and what the log and the client are told of each, in order: the first match
#: wins (InvalidSignatureError is a DecodeError, so it comes first)
_REASONS: tuple[tuple[type[jwt.PyJWTError], str, str], ...] = (
    (jwt.ExpiredSignatureError, Reason.EXPIRED, "token has expired (exp)"),
    (jwt.ImmatureSignatureError, Reason.NOT_YET_VALID, "token is not yet valid (nbf/iat in the future)"),
    (jwt.InvalidAudienceError, Reason.WRONG_AUDIENCE, "wrong audience (aud)"),
    (jwt.InvalidIssuerError, Reason.WRONG_ISSUER, "wrong issuer (iss)"),
    (jwt.InvalidAlgorithmError, Reason.ALGORITHM, "algorithm not allowed"),
    (jwt.InvalidSignatureError, Reason.BAD_SIGNATURE, "bad signature"),
    (jwt.InvalidKeyError, Reason.UNKNOWN_KEY, "key unusable for this token"),
    (jwt.DecodeError, Reason.MALFORMED, "malformed token"),
)


def reason_of(exc: jwt.PyJWTError) -> Rejected:
    """A fixed description of a PyJWT failure: its messages can quote attacker-controlled input."""
    if isinstance(exc, jwt.MissingRequiredClaimError):  # a subclass of none of the table's
        return Rejected(Reason.CLAIMS, f"missing required claim {exc.claim!r}")
    for kind, reason, detail in _REASONS:
        if isinstance(exc, kind):
            return Rejected(reason, detail)
    return Rejected(Reason.MALFORMED, f"invalid token ({type(exc).__name__})")


def _kid(header: Mapping[str, Any]) -> str | None:
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise Rejected(Reason.MALFORMED, "malformed token (kid is not a string)")
    return kid


def _pick(keys: Mapping[str | None, Key], kid: str | None) -> Key | None:
    """The key a token names; a lone key without ``kid`` verifies every token, and a token
    without ``kid`` is verified by a lone key."""
    if len(keys) == 1 and None in keys:
        return keys[None]
    if kid is None:
        if len(keys) == 1:
            return next(iter(keys.values()))
        raise Rejected(Reason.UNKNOWN_KEY, "token has no kid and the key set holds several keys")
    return keys.get(kid)


class KeySource(Protocol):
    """Keys by token header. ``cached`` never waits (None: ask ``fetch_for``, which may do I/O)."""

    def cached(self, header: Mapping[str, Any]) -> Key | None: ...

    def fetch_for(self, header: Mapping[str, Any]) -> Key: ...

    @property
    def algorithms(self) -> frozenset[str]: ...


class StaticKeys:
    """Keys read at startup (HS256 secret, PEM file, JWKS file): never refreshed."""

    def __init__(self, keys: Mapping[str | None, Key]) -> None:
        self._keys = dict(keys)

    def cached(self, header: Mapping[str, Any]) -> Key | None:
        return self.fetch_for(header)

    def fetch_for(self, header: Mapping[str, Any]) -> Key:
        key = _pick(self._keys, _kid(header))
        if key is None:
            raise Rejected(Reason.UNKNOWN_KEY, "unknown kid")
        return key

    @property
    def algorithms(self) -> frozenset[str]:
        return frozenset(k.alg for k in self._keys.values())


class JwksUnavailable(Exception):
    """The key set could not be fetched or read; the message names the URL and the cause."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Only the configured URL is trusted: a redirect (to http, or to an internal address)
    would step around the https-unless-loopback check, so it is an error, not followed."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """Built at the first fetch: building it loads the system's CA certificates (20-45 ms), which
    a server without `auth.jwks_url` never needs (benchmarks/startup.py)."""
    return urllib.request.build_opener(_NoRedirect)


def fetch_jwks(url: str, timeout_s: float) -> dict[str | None, Key]:
    """GET the key set (stdlib urllib: honours the usual proxy variables), size-capped."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    # urllib's timeout is per socket read: a body sent a byte at a time would never time out.
    deadline = time.monotonic() + timeout_s
    try:
        with _opener().open(request, timeout=timeout_s) as response:
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_JWKS_BYTES:
                if time.monotonic() > deadline:
                    raise JwksUnavailable(
                        f"auth.jwks_url {url} did not send its key set within {timeout_s:g} s"
                    )
                chunk = response.read1(MAX_JWKS_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
    except urllib.error.HTTPError as e:  # a 3xx is one too: redirects are not followed
        raise JwksUnavailable(f"auth.jwks_url {url} answered HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        raise JwksUnavailable(f"auth.jwks_url {url} could not be fetched ({type(e).__name__}: {e})") from None
    if len(body) > MAX_JWKS_BYTES:
        raise JwksUnavailable(f"auth.jwks_url {url} sent more than {MAX_JWKS_BYTES} bytes")
    try:
        return parse_jwks(json.loads(body), f"auth.jwks_url {url}", skip_unusable=True)
    except (
        ValueError,
        RecursionError,
        ConfigError,
    ) as e:  # JSONDecodeError is a ValueError; deep nesting recurses
        raise JwksUnavailable(f"auth.jwks_url {url} is not a usable key set ({e})") from None


class RemoteJwks:
    """A provider's key set, cached and refreshed with at most one fetch per interval.

    Thread-safe: the HTTP path fetches on a worker thread (never on the event loop), and
    concurrent misses wait for one fetch instead of each making their own.
    """

    def __init__(
        self,
        url: str,
        *,
        cache_s: float,
        refresh_interval_s: float,
        clock: Clock = SYSTEM_CLOCK,
        timeout_s: float = 5.0,
        fetch: Callable[[str, float], dict[str | None, Key]] = fetch_jwks,
    ) -> None:
        self.url = url
        self._cache_s = cache_s
        self._interval_s = refresh_interval_s
        self._clock = clock
        self._timeout_s = timeout_s
        self._fetch = fetch
        self._keys: dict[str | None, Key] = {}
        self._fetched_at: datetime | None = None  # last successful fetch
        self._tried_at: datetime | None = None  # last attempt, successful or not
        self._lock = threading.Lock()
        self.fetches = 0
        """Fetch attempts so far (for tests and health checks)."""

    def _fresh(self, now: datetime) -> bool:
        return self._fetched_at is not None and (now - self._fetched_at).total_seconds() < self._cache_s

    def _may_fetch(self, now: datetime) -> bool:
        return self._tried_at is None or (now - self._tried_at).total_seconds() >= self._interval_s

    def _answer(self, key: Key | None) -> Key:
        if key is not None:
            return key
        if not self._keys:
            raise Rejected(Reason.KEYS_UNAVAILABLE, f"no signing keys could be fetched from {self.url}")
        raise Rejected(Reason.UNKNOWN_KEY, "unknown kid (not in the provider's current key set)")

    def cached(self, header: Mapping[str, Any]) -> Key | None:
        """The key without I/O; None only when a fetch is due and allowed (then call ``fetch_for``).

        A flood of unknown ``kid``s inside the interval is answered here, without a thread hop.
        """
        now = self._clock.now()
        key = _pick(self._keys, _kid(header)) if self._keys else None
        if (key is not None and self._fresh(now)) or not self._may_fetch(now):
            return self._answer(key)
        return None

    def fetch_for(self, header: Mapping[str, Any]) -> Key:
        kid = _kid(header)
        with self._lock:  # concurrent misses: the first fetches, the others find its result
            now = self._clock.now()
            key = _pick(self._keys, kid) if self._keys else None
            if (key is None or not self._fresh(now)) and self._may_fetch(now):
                self._tried_at = now
                self.fetches += 1
                try:
                    self._keys = self._fetch(self.url, self._timeout_s)
                    self._fetched_at = now
                    log.info("fetched %d signing key(s) from auth.jwks_url %s", len(self._keys), self.url)
                except JwksUnavailable as e:
                    # The last good set stays in use while the provider is down.
                    log.warning("%s; %s", e, "keeping the last key set" if self._keys else "no keys yet")
                key = _pick(self._keys, kid) if self._keys else None
        return self._answer(key)

    @property
    def algorithms(self) -> frozenset[str]:
        return frozenset(k.alg for k in self._keys.values())
