"""Unit tests of token verification, API keys, principal resolution and development tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from hypothesis import given
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, HMACAlgorithm, RSAAlgorithm
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import SecretStr

from mongogate.config import ApiKeyEntry, AuthSettings
from mongogate.errors import AuthError, ConfigError
from mongogate.principal import Principal
from mongogate.server.auth.deferred import DeferredJwtVerifier
from mongogate.server.auth.hs256 import secret_bytes
from mongogate.server.auth.tokens import mint_dev_token, parse_ttl
from mongogate.server.auth.verify import (
    ApiKeyVerifier,
    JwtVerifier,
    build_token_verifier,
    current_principal,
    hash_api_key,
    principal_for_stdio,
    principal_from_access_token,
    require_scopes,
)

ISS = "https://issuer.example"
AUD = "mongogate"
SECRET = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"  # >= 32 bytes: PyJWT warns below
OTHER_SECRET = "other-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- keys and helpers


@dataclass(frozen=True)
class Keys:
    rsa: RSAPrivateKey
    rsa_other: RSAPrivateKey
    ec: EllipticCurvePrivateKey


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        rsa=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        rsa_other=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ec=ec.generate_private_key(ec.SECP256R1()),
    )


def public_pem(private: RSAPrivateKey | EllipticCurvePrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token built by hand, as an attacker would (PyJWT refuses to make these)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    sig = b"" if hmac_key is None else hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


def claims(**changes: Any) -> dict[str, Any]:
    """Valid claims for tenant "acme"; a change to None removes the claim."""
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "alice",
        "tenant_id": "acme",
        "iss": ISS,
        "aud": AUD,
        "iat": now,
        "exp": now + 300,
        "scope": "orders:read memory:write",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def hs(payload: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def rs(k: Keys, payload: dict[str, Any], kid: str | None = None, other: bool = False) -> str:
    headers = {"kid": kid} if kid else None
    return jwt.encode(payload, k.rsa_other if other else k.rsa, algorithm="RS256", headers=headers)


def es(k: Keys, payload: dict[str, Any], kid: str | None = None) -> str:
    headers = {"kid": kid} if kid else None
    return jwt.encode(payload, k.ec, algorithm="ES256", headers=headers)


def auth_settings(**values: Any) -> AuthSettings:
    base: dict[str, Any] = {"mode": "jwt", "issuer": ISS, "audience": AUD, "leeway_s": 30}
    base.update(values)
    return AuthSettings(**base)


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    d = tmp_path_factory.mktemp("keys")
    (d / "rsa.pem").write_bytes(public_pem(keys.rsa))
    (d / "ec.pem").write_bytes(public_pem(keys.ec))
    rsa_jwk = RSAAlgorithm.to_jwk(keys.rsa.public_key(), as_dict=True)
    ec_jwk = ECAlgorithm.to_jwk(keys.ec.public_key(), as_dict=True)
    jwks = {
        "keys": [
            {**rsa_jwk, "kid": "r1", "use": "sig", "alg": "RS256"},
            {**ec_jwk, "kid": "e1"},
            {**RSAAlgorithm.to_jwk(keys.rsa_other.public_key(), as_dict=True), "kid": "x1", "use": "enc"},
        ]
    }
    (d / "jwks.json").write_text(json.dumps(jwks))
    return d


@pytest.fixture(scope="module")
def verifiers(key_dir: Path) -> dict[str, JwtVerifier]:
    return {
        "hs": JwtVerifier(auth_settings(jwt_secret=SECRET)),
        "rs": JwtVerifier(auth_settings(jwt_public_key_file=key_dir / "rsa.pem")),
        "es": JwtVerifier(auth_settings(jwt_public_key_file=key_dir / "ec.pem")),
        "jwks": JwtVerifier(auth_settings(jwks_file=key_dir / "jwks.json")),
        "hs_org": JwtVerifier(auth_settings(jwt_secret=SECRET, tenant_claim="org")),
        "hs_open": JwtVerifier(
            AuthSettings(mode="jwt", jwt_secret=SecretStr(SECRET))
        ),  # no iss/aud configured
    }


# --------------------------------------------------------------------------- the verification table

Make = Callable[[Keys], str]


def now() -> int:
    """Read at token-making time: a module-level constant goes stale in a long test run."""
    return int(time.time())


def _confused_hs_with_rsa_pem(k: Keys) -> str:
    return forge({"alg": "HS256", "typ": "JWT"}, claims(), public_pem(k.rsa))


def _tampered(k: Keys) -> str:
    head, _, sig = hs(claims()).split(".")
    return f"{head}.{b64(json.dumps(claims(tenant_id='globex')).encode())}.{sig}"


CASES: list[Any] = [
    # (verifier, token maker, expected tenant or None for 401)
    pytest.param("hs", lambda k: hs(claims()), "acme", id="valid-hs256"),
    pytest.param("rs", lambda k: rs(k, claims()), "acme", id="valid-rs256-pem"),
    pytest.param("es", lambda k: es(k, claims()), "acme", id="valid-es256-pem"),
    pytest.param("jwks", lambda k: rs(k, claims(), kid="r1"), "acme", id="valid-jwks-rsa-kid"),
    pytest.param("jwks", lambda k: es(k, claims(), kid="e1"), "acme", id="valid-jwks-ec-kid"),
    pytest.param("jwks", lambda k: rs(k, claims(), kid="nope"), None, id="jwks-unknown-kid"),
    pytest.param("jwks", lambda k: rs(k, claims()), None, id="jwks-no-kid-several-keys"),
    pytest.param("jwks", lambda k: rs(k, claims(), kid="e1"), None, id="jwks-rs-token-on-ec-kid"),
    pytest.param("jwks", lambda k: rs(k, claims(), kid="x1", other=True), None, id="jwks-enc-key-ignored"),
    pytest.param("hs", lambda k: "not-a-jwt", None, id="malformed-garbage"),
    pytest.param("hs", lambda k: "a.b.c", None, id="malformed-segments"),
    pytest.param("hs", lambda k: "", None, id="malformed-empty"),
    pytest.param("hs", lambda k: hs(claims()) + "x" * 20_000, None, id="malformed-oversized"),
    pytest.param("hs", lambda k: hs(claims(), OTHER_SECRET), None, id="bad-signature-hs"),
    pytest.param("rs", lambda k: rs(k, claims(), other=True), None, id="bad-signature-rs"),
    pytest.param("hs", _tampered, None, id="tampered-payload"),
    pytest.param("hs", lambda k: hs(claims(exp=now() - 120)), None, id="expired"),
    pytest.param("hs", lambda k: hs(claims(exp=now() - 10)), "acme", id="expired-within-leeway"),
    pytest.param("hs", lambda k: hs(claims(exp=None)), None, id="missing-exp"),
    pytest.param("hs", lambda k: hs(claims(nbf=now() + 120)), None, id="not-yet-valid-nbf"),
    pytest.param("hs", lambda k: hs(claims(nbf=now() + 10)), "acme", id="nbf-within-leeway"),
    pytest.param("hs", lambda k: hs(claims(iss="https://evil.example")), None, id="wrong-issuer"),
    pytest.param("hs", lambda k: hs(claims(iss=None)), None, id="missing-issuer"),
    pytest.param("hs", lambda k: hs(claims(aud="someone-else")), None, id="wrong-audience"),
    pytest.param("hs", lambda k: hs(claims(aud=None)), None, id="missing-audience"),
    pytest.param("hs", lambda k: hs(claims(aud=["other", AUD])), "acme", id="audience-in-list"),
    pytest.param("hs_open", lambda k: hs(claims(iss=None, aud=None)), "acme", id="no-iss-aud-configured"),
    pytest.param("hs_open", lambda k: hs(claims(iss=None)), None, id="aud-present-but-not-configured"),
    pytest.param(
        "hs", lambda k: forge({"alg": "none", "typ": "JWT"}, claims(), None), None, id="alg-none-hs"
    ),
    pytest.param(
        "rs", lambda k: forge({"alg": "none", "typ": "JWT"}, claims(), None), None, id="alg-none-rs"
    ),
    pytest.param(
        "jwks", lambda k: forge({"alg": "none", "kid": "r1"}, claims(), None), None, id="alg-none-jwks"
    ),
    pytest.param("hs", lambda k: forge({"alg": "None"}, claims(), None), None, id="alg-None-capitalised"),
    pytest.param("rs", _confused_hs_with_rsa_pem, None, id="confusion-hs256-signed-with-rsa-pem"),
    pytest.param(
        "es", lambda k: forge({"alg": "HS256"}, claims(), public_pem(k.ec)), None, id="confusion-es"
    ),
    pytest.param("hs", lambda k: rs(k, claims()), None, id="confusion-rs256-on-hs-server"),
    pytest.param("rs", lambda k: es(k, claims()), None, id="es256-on-rs-server"),
    pytest.param("hs", lambda k: hs(claims(tenant_id=None)), None, id="missing-tenant"),
    pytest.param("hs", lambda k: hs(claims(tenant_id="")), None, id="empty-tenant"),
    pytest.param("hs", lambda k: hs(claims(tenant_id=" acme")), None, id="padded-tenant"),
    pytest.param("hs", lambda k: hs(claims(tenant_id=123)), None, id="non-string-tenant"),
    pytest.param("hs", lambda k: hs(claims(tenant_id=["acme"])), None, id="list-tenant"),
    pytest.param("hs_org", lambda k: hs(claims(org="globex")), "globex", id="custom-tenant-claim"),
    pytest.param("hs_org", lambda k: hs(claims()), None, id="custom-tenant-claim-missing"),
    pytest.param("hs", lambda k: hs(claims(sub=42)), None, id="non-string-sub"),
    pytest.param("hs", lambda k: hs(claims(scope=None, scp=["a", "b"])), "acme", id="scp-list"),
    pytest.param("hs", lambda k: hs(claims(scope=None, scopes=["a"])), "acme", id="scopes-list"),
    pytest.param("hs", lambda k: hs(claims(scope=7)), None, id="scope-wrong-type"),
    pytest.param("hs", lambda k: f"{b64(b'[]')}.{b64(b'{}')}.x", None, id="header-not-object"),
    pytest.param(
        "hs", lambda k: forge({"alg": "HS256"}, claims(exp="soon"), SECRET.encode()), None, id="exp-text"
    ),
    pytest.param(
        "hs", lambda k: forge({"alg": "HS256"}, claims(aud=[1]), SECRET.encode()), None, id="aud-not-str"
    ),
    pytest.param("hs", lambda k: forge({"alg": ["HS256"]}, claims(), SECRET.encode()), None, id="alg-list"),
    pytest.param(
        "hs", lambda k: forge({"alg": "HS256"}, claims(), SECRET.encode()), "acme", id="forged-with-key"
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("verifier", "make", "tenant"), CASES)
async def test_verify_token(
    verifiers: dict[str, JwtVerifier],
    keys: Keys,
    verifier: str,
    make: Make,
    tenant: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = make(keys)
    with caplog.at_level(logging.DEBUG, logger="mongogate"):
        result = await verifiers[verifier].verify_token(token)
    if tenant is None:
        assert result is None
        assert "bearer token rejected" in caplog.text
    else:
        assert result is not None
        assert result.claims is not None and result.claims["tenant"] == tenant
        assert principal_from_access_token(result).tenant == tenant
    if token:
        assert token not in caplog.text
        for part in token.split("."):
            assert len(part) < 8 or part not in caplog.text


@pytest.mark.anyio
async def test_valid_token_fields(verifiers: dict[str, JwtVerifier]) -> None:
    c = claims()
    token = hs(c)
    result = await verifiers["hs"].verify_token(token)
    assert result == AccessToken(
        token=token,
        client_id='["jwt","acme","alice"]',  # the session owner: tenant and subject
        scopes=["orders:read", "memory:write"],
        expires_at=c["exp"] + 30,  # leeway included: the SDK re-checks expiry without one
        resource=AUD,
        subject="alice",
        claims={"tenant": "acme", "iss": ISS},
    )
    p = principal_from_access_token(result)
    assert p == Principal(tenant="acme", subject="alice", scopes=frozenset({"orders:read", "memory:write"}))


@pytest.mark.anyio
async def test_scp_list_and_missing_sub(verifiers: dict[str, JwtVerifier]) -> None:
    result = await verifiers["hs"].verify_token(hs(claims(sub=None, scope=None, scp=["a", "b"])))
    assert result is not None
    assert result.scopes == ["a", "b"]
    # without `sub` the caller is that token alone (a digest prefix), never a shared "unknown"
    assert result.subject is not None and result.subject.startswith("token:")
    assert result.client_id == f'["jwt","acme","{result.subject}"]'
    assert principal_from_access_token(result).subject == result.subject


def test_algorithms_pinned_from_key(verifiers: dict[str, JwtVerifier]) -> None:
    assert verifiers["hs"].algorithms == {"HS256"}
    assert verifiers["rs"].algorithms == {"RS256"}
    assert verifiers["es"].algorithms == {"ES256"}
    assert verifiers["jwks"].algorithms == {"RS256", "ES256"}


@pytest.mark.anyio
async def test_single_jwks_key_without_kid(tmp_path: Path, keys: Keys) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"keys": [ECAlgorithm.to_jwk(keys.ec.public_key(), as_dict=True)]}))
    v = JwtVerifier(auth_settings(jwks_file=path))
    assert v.algorithms == {"ES256"}
    assert await v.verify_token(es(keys, claims())) is not None
    assert await v.verify_token(es(keys, claims(), kid="whatever")) is not None
    assert await v.verify_token(rs(keys, claims())) is None


# --------------------------------------------------------------------------- configuration errors


def test_build_token_verifier_by_mode(key_dir: Path) -> None:
    assert build_token_verifier(AuthSettings(mode="none", tenant="acme")) is None
    deferred = build_token_verifier(auth_settings(jwt_secret=SECRET))
    assert isinstance(deferred, DeferredJwtVerifier)  # PyJWT imported at the first token
    assert isinstance(deferred.built(), JwtVerifier)
    entry = ApiKeyEntry(sha256=hash_api_key("k" * 40), tenant="acme")
    assert isinstance(build_token_verifier(AuthSettings(mode="api_keys", api_keys=[entry])), ApiKeyVerifier)


def _write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return p


def test_short_secret_refused() -> None:
    short = "too-short-secret"
    with pytest.raises(ConfigError, match="at least 32") as exc:
        build_token_verifier(auth_settings(jwt_secret=short))
    assert short not in str(exc.value)
    assert "MONGOGATE_AUTH__JWT_SECRET" in str(exc.value)


def test_pem_as_secret_refused(keys: Keys) -> None:
    with pytest.raises(ConfigError, match="jwt_public_key_file"):
        build_token_verifier(auth_settings(jwt_secret=public_pem(keys.rsa).decode()))


@pytest.mark.anyio
async def test_an_hs256_secret_server_verifies_its_first_token_with_pyjwt() -> None:
    verifier = build_token_verifier(auth_settings(jwt_secret=SECRET))
    assert verifier is not None
    assert (await verifier.verify_token(hs(claims()))) is not None
    assert await verifier.verify_token(hs(claims(), secret="another-secret-of-32-bytes-or-more!!")) is None


_SSH = [
    b"ssh-ed25519 AAAAC3Nza",
    b"ssh-rsa AAAAB3",
    b"ecdsa-sha2-nistp256 AAAA",
    b"sk-ssh-ed25519@openssh.com AA",
]
_PEM_LABELS = [b"PUBLIC KEY", b"RSA PUBLIC KEY", b"CERTIFICATE", b"EC PRIVATE KEY", b"SOMETHING ELSE"]


@pytest.mark.parametrize(
    "secret",
    [
        *(s + b" " + b"x" * 40 for s in _SSH),
        *(
            b"-----BEGIN " + label + b"-----\n" + b"A" * 40 + b"\n-----END " + label + b"-----\n"
            for label in _PEM_LABELS
        ),
        b"padding padding padding padding ---- BEGIN PUBLIC KEY ----\nAAAA\n---- END PUBLIC KEY ----",
        b"-----BEGIN PUBLIC KEY----- and no end, padded to 32 bytes or more",
    ],
)
def test_the_secret_check_without_pyjwt_refuses_what_pyjwt_refuses_and_more(secret: bytes) -> None:
    """`hs256.secret_bytes` runs at build without PyJWT; PyJWT's check runs at the first token.
    Ours must refuse every secret PyJWT's refuses (and may refuse more)."""
    with pytest.raises(ConfigError, match="looks like a public key"):
        secret_bytes(auth_settings(jwt_secret=secret.decode()))
    pyjwt_refuses = False
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)
    except jwt.InvalidKeyError:
        pyjwt_refuses = True
    assert pyjwt_refuses or b"SOMETHING ELSE" in secret or b"no end" in secret or b"sk-ssh" in secret


_PARTS = [b"-----BEGIN ", b"---- BEGIN ", b"-----END ", b"---- END ", b"-----", b" ----", b"PUBLIC KEY"]
_PARTS += [
    b"CERTIFICATE",
    b"RSA PRIVATE KEY",
    b"\n",
    b"\r\n",
    b"AAAA",
    b" ",
    b"ssh-rsa",
    b"ecdsa-sha2-nistp384",
]


@given(st.lists(st.sampled_from(_PARTS), max_size=12).map(lambda parts: b"".join(parts) + b"x" * 32))
def test_every_secret_pyjwt_refuses_is_refused_without_it(secret: bytes) -> None:
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)
    except jwt.InvalidKeyError:
        with pytest.raises(ConfigError):
            secret_bytes(auth_settings(jwt_secret=secret.decode()))


def test_missing_pem_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.pem"
    with pytest.raises(ConfigError, match="cannot read") as exc:
        build_token_verifier(auth_settings(jwt_public_key_file=path))
    assert str(path) in str(exc.value)
    assert "PEM public key" in str(exc.value)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param("hello", "not a valid PEM public key", id="garbage"),
        pytest.param(
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a valid PEM", id="bad"
        ),
    ],
)
def test_invalid_pem_file(tmp_path: Path, content: str, match: str) -> None:
    path = _write(tmp_path, "k.pem", content)
    with pytest.raises(ConfigError, match=match) as exc:
        build_token_verifier(auth_settings(jwt_public_key_file=path))
    assert str(path) in str(exc.value)


def test_private_key_pem_refused(tmp_path: Path, keys: Keys) -> None:
    pem = keys.rsa.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = _write(tmp_path, "priv.pem", pem)
    with pytest.raises(ConfigError, match="private key"):
        build_token_verifier(auth_settings(jwt_public_key_file=path))


def test_small_rsa_key_refused(tmp_path: Path) -> None:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    path = _write(tmp_path, "small.pem", public_pem(small))
    with pytest.raises(ConfigError, match="1024 bits"):
        build_token_verifier(auth_settings(jwt_public_key_file=path))


def test_unsupported_curve_refused(tmp_path: Path) -> None:
    k = ec.generate_private_key(ec.SECP256K1())
    path = _write(tmp_path, "k1.pem", public_pem(k))
    with pytest.raises(ConfigError, match="not supported"):
        build_token_verifier(auth_settings(jwt_public_key_file=path))


def _jwks_error(tmp_path: Path, doc: object) -> str:
    path = _write(tmp_path, "jwks.json", doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ConfigError) as exc:
        build_token_verifier(auth_settings(jwks_file=path))
    assert str(path) in str(exc.value)
    return str(exc.value)


def test_jwks_errors(tmp_path: Path, keys: Keys) -> None:
    rsa_jwk = RSAAlgorithm.to_jwk(keys.rsa.public_key(), as_dict=True)
    ec_jwk = ECAlgorithm.to_jwk(keys.ec.public_key(), as_dict=True)
    with pytest.raises(ConfigError, match="cannot read"):
        build_token_verifier(auth_settings(jwks_file=tmp_path / "absent.json"))
    assert "not valid JSON" in _jwks_error(tmp_path, "{nope")
    assert '"keys"' in _jwks_error(tmp_path, [1, 2])
    assert "no signature keys" in _jwks_error(tmp_path, {"keys": []})
    private = RSAAlgorithm.to_jwk(keys.rsa, as_dict=True)
    message = _jwks_error(tmp_path, {"keys": [private]})
    assert "private key material" in message and private["d"] not in message
    assert "'oct'" in _jwks_error(tmp_path, {"keys": [{"kty": "oct", "k": b64(SECRET.encode())}]})
    assert "every key needs a 'kid'" in _jwks_error(tmp_path, {"keys": [rsa_jwk, ec_jwk]})
    assert "every key needs a 'kid'" in _jwks_error(tmp_path, {"keys": [{**rsa_jwk, "kid": "a"}, ec_jwk]})
    assert "does not match curve" in _jwks_error(tmp_path, {"keys": [{**ec_jwk, "alg": "RS256"}]})
    assert "does not fit an RSA key" in _jwks_error(tmp_path, {"keys": [{**rsa_jwk, "alg": "HS256"}]})
    assert "duplicate kid" in _jwks_error(
        tmp_path, {"keys": [{**rsa_jwk, "kid": "a"}, {**ec_jwk, "kid": "a"}]}
    )
    bad = {**rsa_jwk, "n": "!!!"}
    assert "not a valid RSA public key" in _jwks_error(tmp_path, {"keys": [bad]})


# --------------------------------------------------------------------------- API keys

KEY_A = "mg_live_acme_0123456789abcdefghijklmnop"
KEY_B = "mg_live_globex_0123456789abcdefghijklmnop"


def api_auth() -> AuthSettings:
    return AuthSettings(
        mode="api_keys",
        api_keys=[
            ApiKeyEntry(
                sha256=hash_api_key(KEY_A), tenant="acme", subject="acme-bot", scopes=["orders:read"]
            ),
            ApiKeyEntry(sha256=hash_api_key(KEY_B).upper(), tenant="globex"),
        ],
    )


@pytest.mark.anyio
async def test_api_key_known(caplog: pytest.LogCaptureFixture) -> None:
    v = ApiKeyVerifier(api_auth().api_keys)
    with caplog.at_level(logging.DEBUG, logger="mongogate"):
        a = await v.verify_token(KEY_A)
        b = await v.verify_token(KEY_B)
    assert a is not None and principal_from_access_token(a) == Principal(
        tenant="acme", subject="acme-bot", scopes=frozenset({"orders:read"})
    )
    assert b is not None
    pb = principal_from_access_token(b)
    assert pb.tenant == "globex" and pb.subject.startswith("apikey:") and pb.scopes == frozenset()
    assert KEY_A not in caplog.text and KEY_B not in caplog.text


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["", "unknown-key-0123456789abcdefghijk", KEY_A + " ", hash_api_key(KEY_A)])
async def test_api_key_unknown(key: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="mongogate"):
        assert await ApiKeyVerifier(api_auth().api_keys).verify_token(key) is None
    if key:
        assert key not in caplog.text


def test_api_keys_mode_needs_entries_decided_by_the_settings() -> None:
    """The rule lives in AuthSettings (one place); a verifier with no entries lets no key in."""
    with pytest.raises(ValueError, match=r"\[\[auth.api_keys\]\]"):
        AuthSettings(mode="api_keys")
    assert ApiKeyVerifier([]).lookup("mg_live_acme_0123456789abcdefghijklmnop") is None


def test_a_jwt_verifier_needs_the_jwt_mode_whose_settings_chose_one_key_source() -> None:
    with pytest.raises(ConfigError, match=r"auth\.mode 'jwt'"):
        JwtVerifier(AuthSettings.model_validate({"mode": "none", "jwt_secret": SECRET}))


# --------------------------------------------------------------------------- stdio principal


def test_stdio_none_with_tenant() -> None:
    auth = AuthSettings(mode="none", tenant="acme")
    assert principal_for_stdio(auth, {}) == Principal(tenant="acme", subject="local")
    granted = principal_for_stdio(auth, {}, grant_scopes=["orders:read"])
    assert granted.scopes == frozenset({"orders:read"})


@pytest.mark.parametrize("tenant", [None, "", "  "])
def test_stdio_none_without_tenant_explains(tenant: str | None) -> None:
    with pytest.raises(ConfigError) as exc:
        principal_for_stdio(AuthSettings(mode="none", tenant=tenant), {})
    message = str(exc.value)
    assert "auth.tenant" in message and "MONGOGATE_AUTH__TENANT" in message


def test_stdio_api_key() -> None:
    p = principal_for_stdio(api_auth(), {"MONGOGATE_API_KEY": KEY_A})
    assert p == Principal(tenant="acme", subject="acme-bot", scopes=frozenset({"orders:read"}))


def test_stdio_api_key_missing_explains() -> None:
    with pytest.raises(ConfigError, match="MONGOGATE_API_KEY"):
        principal_for_stdio(api_auth(), {})


def test_stdio_api_key_unknown_explains() -> None:
    wrong = "wrong-key-0123456789abcdefghijklmnop"
    with pytest.raises(ConfigError, match="matches no") as exc:
        principal_for_stdio(api_auth(), {"MONGOGATE_API_KEY": wrong})
    assert wrong not in str(exc.value)
    assert hash_api_key(wrong)[:8] in str(exc.value)


def test_stdio_jwt() -> None:
    auth = auth_settings(jwt_secret=SECRET)
    p = principal_for_stdio(auth, {"MONGOGATE_TOKEN": hs(claims())})
    assert p == Principal(tenant="acme", subject="alice", scopes=frozenset({"orders:read", "memory:write"}))


def test_stdio_jwt_missing_explains() -> None:
    with pytest.raises(ConfigError, match="MONGOGATE_TOKEN") as exc:
        principal_for_stdio(auth_settings(jwt_secret=SECRET), {})
    assert "mongogate token" in str(exc.value)


def test_stdio_jwt_invalid_explains() -> None:
    token = hs(claims(exp=now() - 3600))
    with pytest.raises(ConfigError, match="MONGOGATE_TOKEN was rejected: token has expired") as exc:
        principal_for_stdio(auth_settings(jwt_secret=SECRET), {"MONGOGATE_TOKEN": token})
    assert token not in str(exc.value)
    with pytest.raises(ConfigError, match="missing required claim 'tenant_id'"):
        principal_for_stdio(auth_settings(jwt_secret=SECRET), {"MONGOGATE_TOKEN": hs(claims(tenant_id=None))})
    with pytest.raises(ConfigError, match="'tenant_id' must be a non-empty string"):
        principal_for_stdio(auth_settings(jwt_secret=SECRET), {"MONGOGATE_TOKEN": hs(claims(tenant_id=""))})


# --------------------------------------------------------------------------- per-call principal and scopes


@pytest.fixture
def authenticated() -> Iterator[Callable[[AccessToken], None]]:
    """Sets the SDK's auth context variable as its middleware does for an authenticated request."""
    resets: list[Any] = []

    def set_token(token: AccessToken) -> None:
        resets.append(auth_context_var.set(AuthenticatedUser(token)))

    yield set_token
    for reset in reversed(resets):
        auth_context_var.reset(reset)


def test_current_principal_from_token(authenticated: Callable[[AccessToken], None]) -> None:
    stdio = Principal(tenant="local-tenant")
    token = AccessToken(token="t", client_id="bob", scopes=["s"], subject="bob", claims={"tenant": "globex"})
    authenticated(token)
    assert current_principal(None, stdio) == Principal(
        tenant="globex", subject="bob", scopes=frozenset({"s"})
    )


def test_current_principal_token_without_tenant(authenticated: Callable[[AccessToken], None]) -> None:
    authenticated(AccessToken(token="t", client_id="bob", scopes=[]))
    with pytest.raises(AuthError, match="no tenant"):
        current_principal(None, Principal(tenant="local-tenant"))


def test_current_principal_falls_back_to_stdio() -> None:
    stdio = Principal(tenant="acme", subject="local")
    assert current_principal(object(), stdio) is stdio


def test_current_principal_unauthenticated() -> None:
    with pytest.raises(AuthError, match="not authenticated"):
        current_principal(None, None)


def test_require_scopes() -> None:
    p = Principal(tenant="acme", subject="alice", scopes=frozenset({"orders:read"}))
    require_scopes(p, [], "find_orders")
    require_scopes(p, ["orders:read"], "find_orders")
    with pytest.raises(AuthError) as exc:
        require_scopes(p, ["orders:read", "orders:admin", "billing:read"], "find_orders")
    message = str(exc.value)
    assert "'find_orders'" in message and "billing:read, orders:admin" in message
    assert exc.value.code == "unauthorized"


# --------------------------------------------------------------------------- development tokens


@pytest.mark.anyio
async def test_mint_dev_token_round_trip() -> None:
    auth = auth_settings(jwt_secret=SECRET)
    token = mint_dev_token(auth, tenant="acme", ttl_s=600, subject="dev-user", scopes=["orders:read", "x"])
    result = await JwtVerifier(auth).verify_token(token)
    assert result is not None
    assert principal_from_access_token(result) == Principal(
        tenant="acme", subject="dev-user", scopes=frozenset({"orders:read", "x"})
    )
    payload = jwt.decode(token, SECRET, algorithms=["HS256"], audience=AUD)
    assert payload["exp"] - payload["iat"] == 600 and payload["nbf"] == payload["iat"]
    assert payload["iss"] == ISS and payload["aud"] == AUD


@pytest.mark.anyio
async def test_mint_dev_token_custom_claim_no_iss_aud() -> None:
    auth = AuthSettings(mode="jwt", jwt_secret=SecretStr(SECRET), tenant_claim="org")
    token = mint_dev_token(auth, tenant="globex")
    payload = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert payload["org"] == "globex" and "iss" not in payload and "aud" not in payload
    assert "scope" not in payload and payload["sub"] == "dev"
    result = await JwtVerifier(auth).verify_token(token)
    assert result is not None and result.claims == {"tenant": "globex", "iss": None}


@pytest.mark.anyio
async def test_minted_token_rejected_by_other_issuer_config() -> None:
    token = mint_dev_token(auth_settings(jwt_secret=SECRET), tenant="acme")
    other = JwtVerifier(auth_settings(jwt_secret=SECRET, issuer="https://other.example"))
    assert await other.verify_token(token) is None


def test_mint_dev_token_needs_hs256(key_dir: Path) -> None:
    with pytest.raises(ConfigError, match="jwt_secret"):
        mint_dev_token(AuthSettings(mode="none", tenant="acme"), tenant="acme")
    with pytest.raises(ConfigError, match="identity provider"):
        mint_dev_token(auth_settings(jwt_public_key_file=key_dir / "rsa.pem"), tenant="acme")
    with pytest.raises(ConfigError, match="at least 32"):
        mint_dev_token(auth_settings(jwt_secret="short"), tenant="acme")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tenant": ""}, "invalid tenant"),
        ({"tenant": " acme"}, "invalid tenant"),
        ({"tenant": "acme", "ttl_s": 0}, "ttl_s"),
        ({"tenant": "acme", "scopes": ["a b"]}, "invalid scopes"),
        ({"tenant": "acme", "scopes": [""]}, "invalid scopes"),
    ],
)
def test_mint_dev_token_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mint_dev_token(auth_settings(jwt_secret=SECRET), **kwargs)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h", 3600), ("2d", 172800), ("3600", 3600), (" 1H ", 3600), ("15M", 900)],
)
def test_parse_ttl(text: str, seconds: int) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1w", "-1h", "1.5h", "0", "0s", "1h30m", "abc"])
def test_parse_ttl_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_ttl(text)
