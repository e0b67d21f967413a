"""Verification keys for JWTs: the HS256 secret, PEM public keys and JWKS files.

Keys are read when a verifier is built (at startup) and each is pinned to the one algorithm
it may verify, taken from the key, never from a token. Problems are reported as
``ConfigError`` naming the setting and what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import HMACAlgorithm

from mongogate.config import AuthSettings
from mongogate.errors import ConfigError
from mongogate.server.auth.hs256 import public_key_as_secret, secret_bytes

#: NIST SP 800-131A; PyJWT warns below this, and a warning is an error in our tests.
MIN_RSA_BITS = 2048

_EC_ALG_BY_CURVE: dict[str, str] = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_EC_ALG_BY_JWK_CRV: dict[str, str] = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})


@dataclass(frozen=True)
class Key:
    """A verification key and the one algorithm it may be used with (pinned from the key, not the token)."""

    alg: str
    key: Any  # bytes for HS256, a cryptography public-key object otherwise


def hs256_secret_bytes(auth: AuthSettings) -> bytes:
    """The configured HS256 secret, refused when too short or when it is really a PEM key (our
    check, `hs256.secret_bytes`, then PyJWT's own)."""
    secret = secret_bytes(auth)
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)
    except jwt.InvalidKeyError as e:
        # PyJWT refuses PEM/SSH public keys as HMAC secrets: that is the algorithm-confusion trap.
        raise ConfigError(public_key_as_secret()) from e
    return secret


def _key_from_public_key(public: object, where: str) -> Key:
    """Pin the algorithm from the key type: RSA -> RS256, EC P-256/384/521 -> ES256/384/512."""
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < MIN_RSA_BITS:
            raise ConfigError(
                f"{where}: the RSA key has {public.key_size} bits; at least {MIN_RSA_BITS} needed"
            )
        return Key("RS256", public)
    if isinstance(public, ec.EllipticCurvePublicKey):
        alg = _EC_ALG_BY_CURVE.get(public.curve.name)
        if alg is None:
            raise ConfigError(f"{where}: EC curve {public.curve.name} is not supported; use P-256 (ES256)")
        return Key(alg, public)
    raise ConfigError(
        f"{where}: expected an RSA (RS256) or EC P-256 (ES256) public key, got {type(public).__name__}"
    )


def load_pem_public_key(path: Path) -> Key:
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


def _jwk_key(jwk: Mapping[str, Any], here: str) -> Key:
    alg = _jwk_alg(jwk, here)
    try:
        public = jwt.PyJWK(dict(jwk), algorithm=alg).key
    except (jwt.PyJWTError, ValueError, KeyError, TypeError) as e:
        # PyJWT's messages echo the whole JWK; say only what is wrong.
        raise ConfigError(f"{here}: not a valid {jwk.get('kty')} public key ({type(e).__name__})") from e
    key = _key_from_public_key(public, here)
    if key.alg.startswith("ES") and key.alg != alg:
        raise ConfigError(f"{here}: alg {alg} does not match the key's curve ({key.alg})")
    return Key(alg, public)


def load_jwks(path: Path) -> dict[str | None, Key]:
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
    return parse_jwks(doc, where)


def _public_kid(jwk: dict[str, Any], here: str) -> str | None:
    """The JWK's `kid`, once it is known to hold no private key material."""
    if "d" in jwk:
        raise ConfigError(f"{here}: contains private key material ('d'); publish only the public key")
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ConfigError(f"{here}: 'kid' must be a string")
    return kid


def _no_clash(keys: dict[str | None, Key], kid: str | None, here: str, where: str) -> None:
    """A key's `kid` names it alone: no duplicate, and every key has one when there are several."""
    if kid in keys or (keys and (kid is None or None in keys)):
        if kid is not None and kid in keys:
            raise ConfigError(f"{here}: duplicate kid {kid!r}")
        raise ConfigError(f"{where}: with several keys every key needs a 'kid' so tokens can name theirs")


def parse_jwks(doc: object, where: str, *, skip_unusable: bool = False) -> dict[str | None, Key]:
    """A JSON Web Key Set into ``kid -> key``; signature keys only, public parts only.

    ``skip_unusable`` (a provider's JWKS URL) drops keys of a type we do not verify with (an
    Ed25519 key beside the RSA ones) instead of refusing the whole set; a file is ours to fix.
    """
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f'{where}: expected a JSON object {{"keys": [...]}} (a JSON Web Key Set)')
    keys: dict[str | None, Key] = {}
    for i, jwk in enumerate(entries):
        here = f"{where}: keys[{i}]"
        if not isinstance(jwk, dict):
            raise ConfigError(f"{here}: expected a JSON object (a JWK)")
        if jwk.get("use", "sig") != "sig":
            continue  # encryption keys are not for verifying signatures
        kid = _public_kid(jwk, here)
        try:
            key = _jwk_key(jwk, here)
        except ConfigError:
            if skip_unusable:
                continue
            raise
        _no_clash(keys, kid, here, where)
        keys[kid] = key
    if not keys:
        raise ConfigError(f"{where}: no signature keys (expected at least one RSA or EC key with use 'sig')")
    return keys
