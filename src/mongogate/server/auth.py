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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import HMACAlgorithm
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.config import ApiKeyEntry, AuthSettings
from mongogate.errors import AuthError, ConfigError
from mongogate.principal import Principal

logger = logging.getLogger(__name__)

#: Environment variable holding the API key of a stdio server in ``api_keys`` mode.
API_KEY_ENV = "MONGOGATE_API_KEY"
#: Environment variable holding the JWT of a stdio server in ``jwt`` mode.
TOKEN_ENV = "MONGOGATE_TOKEN"

#: RFC 7518 §3.2: an HS256 key must be at least as long as the hash output.
MIN_HS256_SECRET_BYTES = 32
#: NIST SP 800-131A; PyJWT warns below this, and a warning is an error in our tests.
MIN_RSA_BITS = 2048
#: Bearer tokens longer than this are refused before any parsing (cheap DoS guard).
MAX_TOKEN_CHARS = 16 * 1024

_EC_ALG_BY_CURVE: dict[str, str] = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_EC_ALG_BY_JWK_CRV: dict[str, str] = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_GENERATE_SECRET_HINT = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"


def hash_api_key(key: str) -> str:
    """The hex SHA-256 digest stored in ``[[auth.api_keys]] sha256`` (the key itself is never stored)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _valid_tenant(value: object) -> str | None:
    """A tenant is a non-empty string without surrounding whitespace (" acme" must not pass as "acme")."""
    if isinstance(value, str) and value and value.strip() == value:
        return value
    return None


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class _Key:
    """A verification key and the one algorithm it may be used with (pinned from the key, not the token)."""

    alg: str
    key: Any  # bytes for HS256, a cryptography public-key object otherwise


def hs256_secret_bytes(auth: AuthSettings) -> bytes:
    """The configured HS256 secret, refused when too short or when it is really a PEM key."""
    if auth.jwt_secret is None:
        raise ConfigError("auth.jwt_secret is not set; HS256 needs a shared secret of at least 32 bytes")
    secret = auth.jwt_secret.get_secret_value().encode("utf-8")
    if len(secret) < MIN_HS256_SECRET_BYTES:
        raise ConfigError(
            f"auth.jwt_secret is {len(secret)} bytes; HS256 needs at least {MIN_HS256_SECRET_BYTES} "
            f"random bytes (RFC 7518 §3.2). Set auth.jwt_secret or MONGOGATE_AUTH__JWT_SECRET; "
            f"{_GENERATE_SECRET_HINT}"
        )
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)
    except jwt.InvalidKeyError as e:
        # PyJWT refuses PEM/SSH public keys as HMAC secrets: that is the algorithm-confusion trap.
        raise ConfigError(
            "auth.jwt_secret looks like a public key; for RS256/ES256 set auth.jwt_public_key_file "
            "to the PEM file instead of putting the key in jwt_secret"
        ) from e
    return secret


def _key_from_public_key(public: object, where: str) -> _Key:
    """Pin the algorithm from the key type: RSA -> RS256, EC P-256/384/521 -> ES256/384/512."""
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < MIN_RSA_BITS:
            raise ConfigError(
                f"{where}: the RSA key has {public.key_size} bits; at least {MIN_RSA_BITS} needed"
            )
        return _Key("RS256", public)
    if isinstance(public, ec.EllipticCurvePublicKey):
        alg = _EC_ALG_BY_CURVE.get(public.curve.name)
        if alg is None:
            raise ConfigError(f"{where}: EC curve {public.curve.name} is not supported; use P-256 (ES256)")
        return _Key(alg, public)
    raise ConfigError(
        f"{where}: expected an RSA (RS256) or EC P-256 (ES256) public key, got {type(public).__name__}"
    )


def _load_pem_public_key(path: Path) -> _Key:
    """Read a PEM public key (or an X.509 certificate) and pin its algorithm."""
    where = f"auth.jwt_public_key_file {path}"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(
            f"{where}: cannot read it ({e.strerror or e}); expected a PEM public key file"
        ) from e
    if b"PRIVATE KEY-----" in data:
        raise ConfigError(
            f"{where}: contains a private key; give the server only the public key "
            "(openssl pkey -in private.pem -pubout -out public.pem)"
        )
    try:
        if b"-----BEGIN CERTIFICATE-----" in data:
            public: object = x509.load_pem_x509_certificate(data).public_key()
        else:
            public = serialization.load_pem_public_key(data)
    except ValueError as e:
        raise ConfigError(
            f"{where}: not a valid PEM public key (expected '-----BEGIN PUBLIC KEY-----' with an RSA or "
            "EC P-256 key)"
        ) from e
    return _key_from_public_key(public, where)


def _jwk_alg(jwk: Mapping[str, Any], where: str) -> str:
    """The one algorithm this JWK may verify: its ``alg`` if it fits ``kty``/``crv``, else derived."""
    kty = jwk.get("kty")
    declared = jwk.get("alg")
    if declared is not None and not isinstance(declared, str):
        raise ConfigError(f"{where}: 'alg' must be a string")
    if kty == "RSA":
        if declared is None:
            return "RS256"
        if declared not in _RSA_ALGS:
            raise ConfigError(
                f"{where}: alg {declared!r} does not fit an RSA key (expected one of {sorted(_RSA_ALGS)})"
            )
        return declared
    if kty == "EC":
        crv = jwk.get("crv")
        derived = _EC_ALG_BY_JWK_CRV.get(crv) if isinstance(crv, str) else None
        if derived is None:
            raise ConfigError(f"{where}: EC curve {crv!r} is not supported (expected P-256, P-384 or P-521)")
        if declared is not None and declared != derived:
            raise ConfigError(f"{where}: alg {declared!r} does not match curve {crv} (expected {derived})")
        return derived
    if kty == "oct":
        raise ConfigError(
            f"{where}: symmetric ('oct') keys are not accepted from a JWKS file; use auth.jwt_secret"
        )
    raise ConfigError(f"{where}: unsupported kty {kty!r}; expected 'RSA' or 'EC'")


def _load_jwks(path: Path) -> dict[str | None, _Key]:
    """Read a JWKS file into ``kid -> key``; signature keys only, public parts only."""
    where = f"auth.jwks_file {path}"
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read it ({e}); expected a JSON Web Key Set file") from e
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f'{where}: not valid JSON ({e.msg} at line {e.lineno}); expected {{"keys": [...]}}'
        ) from e
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f'{where}: expected a JSON object {{"keys": [...]}} (a JSON Web Key Set)')
    keys: dict[str | None, _Key] = {}
    for i, jwk in enumerate(entries):
        here = f"{where}: keys[{i}]"
        if not isinstance(jwk, dict):
            raise ConfigError(f"{here}: expected a JSON object (a JWK)")
        if jwk.get("use", "sig") != "sig":
            continue  # encryption keys are not for verifying signatures
        if "d" in jwk:
            raise ConfigError(f"{here}: contains private key material ('d'); publish only the public key")
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise ConfigError(f"{here}: 'kid' must be a string")
        alg = _jwk_alg(jwk, here)
        try:
            public = jwt.PyJWK(jwk, algorithm=alg).key
        except (jwt.PyJWTError, ValueError, KeyError, TypeError) as e:
            # PyJWT's messages echo the whole JWK; say only what is wrong.
            raise ConfigError(f"{here}: not a valid {jwk.get('kty')} public key ({type(e).__name__})") from e
        key = _key_from_public_key(public, here)
        if key.alg.startswith("ES") and key.alg != alg:
            raise ConfigError(f"{here}: alg {alg} does not match the key's curve ({key.alg})")
        if kid in keys or (keys and (kid is None or None in keys)):
            if kid is not None and kid in keys:
                raise ConfigError(f"{here}: duplicate kid {kid!r}")
            raise ConfigError(f"{where}: with several keys every key needs a 'kid' so tokens can name theirs")
        keys[kid] = _Key(alg, public)
    if not keys:
        raise ConfigError(f"{where}: no signature keys (expected at least one RSA or EC key with use 'sig')")
    return keys


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

    def __init__(self, auth: AuthSettings) -> None:
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
        tenant = _valid_tenant(payload.get(self._tenant_claim))
        if tenant is None:
            raise _Rejected(f"claim {self._tenant_claim!r} must be a non-empty string")
        sub = payload.get("sub")  # PyJWT has checked it is a string when present
        return AccessToken(
            token=token,
            client_id=sub or "unknown",
            scopes=_scopes(payload),
            # The SDK re-checks expires_at against its clock without leeway; give it our effective expiry.
            expires_at=int(payload["exp"]) + self._leeway,
            resource=self._audience,
            subject=sub,
            claims={"tenant": tenant, "iss": payload.get("iss")},
        )

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
        client_id=subject,
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
    return Principal(tenant=tenant, subject=token.subject or token.client_id, scopes=frozenset(token.scopes))


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
