"""Who is calling: bearer tokens (JWT, API keys) to a Principal, and the 401 challenges.

``verify`` builds the verifier the server runs (``build_token_verifier``) and turns a token
into a Principal; ``jwt_verifier`` verifies JWTs (imported only in mode 'jwt': PyJWT and
cryptography stay off the other modes' start-up); ``signing_keys`` loads signing keys (PEM,
JWKS files, the HS256 secret); ``jwks`` fetches and rotates a JWKS URL; ``apikeys`` checks API
keys; ``reasons`` says why a credential was refused; ``challenge`` words the 401; ``tokens``
mints development tokens. Each module imports only the others' public names.
"""
