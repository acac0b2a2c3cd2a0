"""HS256 JSON Web Tokens for slurmrestd, minted with the standard library only.

Slurm's ``auth/jwt`` checks the signature against the cluster's key and reads
the user from the ``sun`` claim; ``exp`` bounds the token's life.
"""

import base64
import hashlib
import hmac
import json


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def mint_token(*, key: bytes, user: str, issued_at: int, lifetime_s: int) -> str:
    """A token that lets ``user`` act through slurmrestd until ``issued_at + lifetime_s``."""
    if not key:
        raise ValueError("the JWT key is empty")
    if lifetime_s <= 0:
        raise ValueError("a token needs a positive lifetime")
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sun": user, "iat": issued_at, "exp": issued_at + lifetime_s}
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"
