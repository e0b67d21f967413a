"""Who is calling: bearer-token verification for HTTP and the fixed principal of a stdio server.

The tenant is read only from a verified credential (a JWT claim or a configured API key) or
from the launch configuration, never from a tool argument. Verification failures return
``None`` so the MCP SDK answers 401 with ``WWW-Authenticate``; the reason is logged, the
token never is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import ApiKeyEntry, AuthSettings
from mongogate.errors import AuthError, ConfigError
from mongogate.principal import Principal
from mongogate.server.keys import (
    MIN_HS256_SECRET_BYTES,
    MIN_RSA_BITS,
    _Key,
    _load_jwks,
    _load_pem_public_key,
    hs256_secret_bytes,
)

__all__ = [
    "API_KEY_ENV",
    "MAX_TOKEN_CHARS",
    "MIN_HS256_SECRET_BYTES",
    "MIN_RSA_BITS",
    "TOKEN_ENV",
    "ApiKeyVerifier",
    "JwtVerifier",
    "build_token_verifier",
    "current_principal",
    "hash_api_key",
    "hs256_secret_bytes",
    "principal_for_stdio",
    "principal_from_access_token",
    "printable",
    "require_scopes",
    "session_owner",
]

logger = logging.getLogger(__name__)

#: Environment variable holding the API key of a stdio server in ``api_keys`` mode.
API_KEY_ENV = "MONGOGATE_API_KEY"
#: Environment variable holding the JWT of a stdio server in ``jwt`` mode.
TOKEN_ENV = "MONGOGATE_TOKEN"
#: Bearer tokens longer than this are refused before any parsing (cheap DoS guard).
MAX_TOKEN_CHARS = 16 * 1024


def hash_api_key(key: str) -> str:
    """The hex SHA-256 digest stored in ``[[auth.api_keys]] sha256`` (the key itself is never stored)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _valid_tenant(value: object) -> str | None:
    """A tenant is a non-empty string without surrounding whitespace (" acme" must not pass as "acme")
    and without control characters (it is a data key and appears in every log line)."""
    if isinstance(value, str) and value and value.strip() == value and value.isprintable():
        return value
    return None


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped, so a log line stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def session_owner(kind: str, tenant: str, subject: str) -> str:
    """The identity the SDK compares to bind an MCP session to its caller (as ``client_id``).

    Tenant and subject are both in it, JSON-encoded so that no choice of names can make two
    different pairs read the same: another tenant's token with the same ``sub`` is another owner.
    """
    return json.dumps([kind, tenant, subject], ensure_ascii=True, separators=(",", ":"))


# --------------------------------------------------------------------------- JWT


class _Rejected(Exception):
    """A token was refused; the message is ours (never token content) and safe to log or show."""


def _reason(exc: jwt.PyJWTError) -> str:
    """A fixed description of a PyJWT failure: its messages can quote attacker-controlled input."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "token has expired (exp)"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "token is not yet valid (nbf/iat in the future)"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "wrong audience (aud)"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "wrong issuer (iss)"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"missing required claim {exc.claim!r}"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "algorithm not allowed"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(exc, jwt.InvalidKeyError):
        return "key unusable for this token"
    if isinstance(exc, jwt.DecodeError):
        return "malformed token"
    return f"invalid token ({type(exc).__name__})"


def _scopes(payload: Mapping[str, Any]) -> list[str]:
    """Scopes from ``scope`` (space-separated, RFC 8693) or ``scp``/``scopes`` (list or space-separated)."""
    for name in ("scope", "scp", "scopes"):
        value = payload.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            return value.split()
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return [s for s in value if s]
        raise _Rejected(f"claim {name!r} must be a string or a list of strings")
    return []


class JwtVerifier(TokenVerifier):
    """Verifies JWTs against one configured key source, with the algorithm pinned by the key.

    The token's ``alg`` header only has to agree with the key; it never chooses the algorithm,
    so ``alg: none`` and HS/RS confusion fail.
    """

    def __init__(self, auth: AuthSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        sources = [s for s in (auth.jwt_secret, auth.jwt_public_key_file, auth.jwks_file) if s is not None]
        if len(sources) != 1:
            raise ConfigError(
                "auth.mode 'jwt' needs exactly one of auth.jwt_secret (HS256), auth.jwt_public_key_file "
                "(RS256/ES256 PEM) or auth.jwks_file"
            )
        self._key: _Key | None = None
        self._jwks: dict[str | None, _Key] | None = None
        if auth.jwt_secret is not None:
            self._key = _Key("HS256", hs256_secret_bytes(auth))
        elif auth.jwt_public_key_file is not None:
            self._key = _load_pem_public_key(auth.jwt_public_key_file)
        elif auth.jwks_file is not None:
            self._jwks = _load_jwks(auth.jwks_file)
        self._tenant_claim = auth.tenant_claim
        self._issuer = auth.issuer
        self._audience = auth.audience
        self._leeway = auth.leeway_s
        self._max_lifetime = auth.max_token_lifetime_s
        self._clock = clock
        self._require = ["exp", auth.tenant_claim]
        if auth.issuer is not None:
            self._require.append("iss")
        if auth.audience is not None:
            self._require.append("aud")

    @property
    def algorithms(self) -> frozenset[str]:
        """The algorithms this verifier accepts (one per configured key)."""
        if self._jwks is not None:
            return frozenset(k.alg for k in self._jwks.values())
        assert self._key is not None
        return frozenset({self._key.alg})

    def _select_key(self, header: Mapping[str, Any]) -> _Key:
        if self._jwks is None:
            assert self._key is not None
            return self._key
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _Rejected("malformed token (kid is not a string)")
        if len(self._jwks) == 1 and None in self._jwks:
            return self._jwks[None]
        if kid is None:
            if len(self._jwks) == 1:
                return next(iter(self._jwks.values()))
            raise _Rejected("token has no kid and the JWKS holds several keys")
        key = self._jwks.get(kid)
        if key is None:
            raise _Rejected("unknown kid")
        return key

    def check(self, token: str) -> AccessToken:
        """Verify ``token`` or raise ``_Rejected`` with a safe reason (shared by HTTP and stdio)."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise _Rejected("malformed token (empty or too long)")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise _Rejected(_reason(e)) from None
        key = self._select_key(header)
        if header.get("alg") != key.alg:
            # PyJWT would refuse too; checking first gives a clear reason and never touches the key.
            raise _Rejected(f"algorithm not allowed (this server accepts only {key.alg})")
        try:
            payload = jwt.decode(
                token,
                key.key,
                algorithms=[key.alg],
                options={"require": list(self._require), "enforce_minimum_key_length": True},
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
            )
        except jwt.PyJWTError as e:
            raise _Rejected(_reason(e)) from None
        exp = self._check_times(payload)
        tenant = _valid_tenant(payload.get(self._tenant_claim))
        if tenant is None:
            raise _Rejected(
                f"claim {self._tenant_claim!r} must be a non-empty string without control characters"
            )
        sub = payload.get("sub")  # PyJWT has checked it is a string when present
        # Without `sub` the caller is this token alone: a digest prefix names it without revealing it.
        subject = sub if sub else "token:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]
        return AccessToken(
            token=token,
            client_id=session_owner("jwt", tenant, subject),
            scopes=_scopes(payload),
            # The SDK re-checks expires_at against its clock without leeway; give it our effective expiry.
            expires_at=exp + self._leeway,
            resource=self._audience,
            subject=subject,
            claims={"tenant": tenant, "iss": payload.get("iss")},
        )

    def _check_times(self, payload: Mapping[str, Any]) -> int:
        """``exp``/``nbf``/``iat`` are JSON numbers (PyJWT accepts "123"), and the token expires
        within ``auth.max_token_lifetime_s`` from now: a stolen long-lived token is refused."""
        for claim in ("exp", "nbf", "iat"):
            value = payload.get(claim)
            if value is None and claim != "exp":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise _Rejected(f"claim {claim!r} must be a number (seconds since the epoch)")
        exp = int(payload["exp"])
        left = exp - self._clock.now().timestamp()
        if left > self._max_lifetime:
            raise _Rejected(
                f"token lifetime too long: it expires in {int(left)} s, more than "
                f"auth.max_token_lifetime_s ({self._max_lifetime} s); ask the issuer for a shorter-lived one"
            )
        return exp

    def verify(self, token: str) -> AccessToken | None:
        """Synchronous form of ``verify_token`` (for the stdio token)."""
        try:
            return self.check(token)
        except _Rejected as e:
            logger.info("bearer token rejected: %s", e)
            return None
        except Exception as e:  # a parser surprise must deny (401), never answer 500
            logger.warning("bearer token rejected: unexpected %s while verifying it", type(e).__name__)
            return None

    async def verify_token(self, token: str) -> AccessToken | None:
        """TokenVerifier protocol: None makes the SDK answer 401 with WWW-Authenticate."""
        return self.verify(token)


# --------------------------------------------------------------------------- API keys


class ApiKeyVerifier(TokenVerifier):
    """Maps API keys, by SHA-256 digest, to a tenant, subject and scopes; keys are never held in clear."""

    def __init__(self, entries: Sequence[ApiKeyEntry]) -> None:
        if not entries:
            raise ConfigError("auth.mode 'api_keys' needs at least one [[auth.api_keys]] entry")
        self._entries = tuple(entries)

    def lookup(self, key: str) -> ApiKeyEntry | None:
        """The entry whose digest matches ``key``; every entry is compared, in constant time each."""
        if not key or len(key) > MAX_TOKEN_CHARS:
            return None
        digest = hash_api_key(key)
        found: ApiKeyEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.sha256) and found is None:
                found = entry
        return found

    def verify(self, key: str) -> AccessToken | None:
        """Synchronous form of ``verify_token``."""
        entry = self.lookup(key)
        if entry is None:
            logger.info("API key rejected: no [[auth.api_keys]] entry matches its digest")
            return None
        return _api_key_access_token(key, entry)

    async def verify_token(self, token: str) -> AccessToken | None:
        """TokenVerifier protocol: None makes the SDK answer 401 with WWW-Authenticate."""
        return self.verify(token)


def _api_key_subject(entry: ApiKeyEntry) -> str:
    # A digest prefix identifies the key in audit logs without revealing it.
    return entry.subject or f"apikey:{entry.sha256[:12]}"


def _api_key_access_token(key: str, entry: ApiKeyEntry) -> AccessToken:
    subject = _api_key_subject(entry)
    return AccessToken(
        token=key,
        client_id=session_owner("api_key", entry.tenant, subject),
        scopes=list(entry.scopes),
        expires_at=None,
        subject=subject,
        claims={"tenant": entry.tenant, "iss": None},
    )


def build_token_verifier(auth: AuthSettings) -> TokenVerifier | None:
    """The verifier for ``auth.mode`` (None for "none"); key files are read and checked now, at startup."""
    if auth.mode == "none":
        return None
    if auth.mode == "jwt":
        return JwtVerifier(auth)
    if auth.mode == "api_keys":
        return ApiKeyVerifier(auth.api_keys)
    raise ConfigError(f"auth.mode {auth.mode!r} is not one of 'none', 'jwt', 'api_keys'")


# --------------------------------------------------------------------------- principals


def principal_from_access_token(token: AccessToken) -> Principal:
    """The principal of a verified token; a token without a tenant (not from our verifiers) is refused."""
    tenant = _valid_tenant((token.claims or {}).get("tenant"))
    if tenant is None:
        raise AuthError("the access token carries no tenant; the request cannot be served")
    # The subject is only ever shown (logs, audit, error texts): escape it once, here.
    subject = printable(token.subject or token.client_id)
    return Principal(tenant=tenant, subject=subject, scopes=frozenset(token.scopes))


def principal_for_stdio(
    auth: AuthSettings, environ: Mapping[str, str], *, grant_scopes: Iterable[str] = ()
) -> Principal:
    """The fixed principal of a server whose caller is whoever launched it (stdio, or unauthenticated HTTP).

    ``grant_scopes`` are given to the local operator in mode "none" (pass the union of the tools'
    required scopes); in the other modes the scopes come from the key or token.
    """
    if auth.mode == "none":
        tenant = _valid_tenant(auth.tenant)
        if tenant is None:
            what = "is not set" if not auth.tenant else "must not be blank or padded with spaces"
            raise ConfigError(
                f"no tenant for this server: auth.mode is 'none' and auth.tenant {what}. Set it in the "
                'config file ([auth] tenant = "acme") or in the environment (MONGOGATE_AUTH__TENANT=acme); '
                "every tool call of this server then reads and writes that tenant's data only"
            )
        return Principal(tenant=tenant, subject=auth.subject, scopes=frozenset(grant_scopes))
    if auth.mode == "api_keys":
        key = environ.get(API_KEY_ENV, "")
        if not key:
            raise ConfigError(
                f"auth.mode is 'api_keys': set the environment variable {API_KEY_ENV} to one of the keys "
                "listed (by SHA-256 digest) in [[auth.api_keys]]; for stdio clients put it in the server's "
                '"env" entry'
            )
        entry = ApiKeyVerifier(auth.api_keys).lookup(key)
        if entry is None:
            raise ConfigError(
                f"{API_KEY_ENV} matches no [[auth.api_keys]] entry (its SHA-256 digest starts "
                f'{hash_api_key(key)[:8]}); add sha256 = "<digest>" for it, computed with '
                "python -c 'import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())' KEY"
            )
        return principal_from_access_token(_api_key_access_token(key, entry))
    if auth.mode == "jwt":
        token = environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise ConfigError(
                f"auth.mode is 'jwt': a stdio server needs a token in the environment variable {TOKEN_ENV} "
                "(for development mint one with: mongogate token --tenant T), or use auth.mode 'none' with "
                "auth.tenant"
            )
        try:
            access = JwtVerifier(auth).check(token)
        except _Rejected as e:
            raise ConfigError(f"{TOKEN_ENV} was rejected: {e}") from None
        return principal_from_access_token(access)
    raise ConfigError(f"auth.mode {auth.mode!r} is not one of 'none', 'jwt', 'api_keys'")


def current_principal(ctx_or_none: object | None, stdio_principal: Principal | None) -> Principal:
    """The caller of the current tool call: the verified bearer token if any, else the launch principal.

    Pass ``stdio_principal`` only when the transport has no authentication (stdio, or HTTP with
    --insecure-no-auth); with auth on, the SDK refuses token-less requests before they get here.
    ``ctx_or_none`` is accepted for the call site's convenience; the token comes from the SDK's
    request context variable.
    """
    del ctx_or_none
    token = get_access_token()
    if token is not None:
        return principal_from_access_token(token)
    if stdio_principal is not None:
        return stdio_principal
    raise AuthError("this request is not authenticated: send 'Authorization: Bearer <token>'")


def require_scopes(principal: Principal, scopes: Sequence[str], tool: str) -> None:
    """Refuse a tool call whose caller lacks any of the tool's required scopes, naming them."""
    missing = sorted(set(scopes) - principal.scopes)
    if missing:
        have = ", ".join(sorted(principal.scopes)) or "none"
        raise AuthError(
            f"tool {tool!r} requires scope(s) {', '.join(missing)} which the caller "
            f"({principal.subject}) lacks; its scopes: {have}. Ask for a token or API key that grants them"
        )
