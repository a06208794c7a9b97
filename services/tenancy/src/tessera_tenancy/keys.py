"""API key secrets: their format, their digest, and the server's pepper.

A key is ``tsk_<key id: 16 hex>_<secret: 64 hex>`` (32 random bytes of secret). Only
``HMAC-SHA256(pepper, key)`` is stored (in the ``ApiKeyIssued`` event and its projection). The
secret is uniformly random with 256 bits of entropy, so a slow password hash would add nothing:
without the pepper the digest cannot even be checked, and with it a guess costs 2^256 tries
(the same reasoning as GitHub's and Stripe's token schemes; OWASP Password Storage Cheat Sheet,
"peppering"). The key id inside the key finds the record without scanning.

The pepper comes from ``TESSERA_KEY_PEPPER`` (hex, at least 32 bytes), else from
``<TESSERA_HOME>/key-pepper`` (created with mode 0600 on first use).
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
from hashlib import sha256
from pathlib import Path

KEY = re.compile(r"^tsk_([0-9a-f]{16})_([0-9a-f]{64})$")
PREFIX_LENGTH = 20  # "tsk_" + the key id: identifies a key to people, reveals nothing secret


class PepperError(RuntimeError):
    """The configured pepper is missing or too short."""


def load_pepper(home: Path) -> bytes:
    """The server's pepper (see the module docstring).

    Raises:
        PepperError: ``TESSERA_KEY_PEPPER`` is not hex of at least 32 bytes.
    """
    configured = os.environ.get("TESSERA_KEY_PEPPER")
    if configured:
        try:
            pepper = bytes.fromhex(configured)
        except ValueError:
            raise PepperError("TESSERA_KEY_PEPPER must be hex") from None
        if len(pepper) < 32:
            raise PepperError("TESSERA_KEY_PEPPER must be at least 32 bytes (64 hex digits)")
        return pepper
    path = home / "key-pepper"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def new_key() -> tuple[str, str]:
    """A fresh (key id ``k_<16 hex>``, key). The key is shown once and never stored."""
    ident = secrets.token_hex(8)
    return f"k_{ident}", f"tsk_{ident}_{secrets.token_hex(32)}"


def digest(pepper: bytes, key: str) -> str:
    """HMAC-SHA256 of the key under the pepper, hex."""
    return hmac.new(pepper, key.encode(), sha256).hexdigest()


def key_id_of(key: str) -> str | None:
    """The key id inside a presented key, or None when it is not of the key format."""
    m = KEY.match(key)
    return f"k_{m.group(1)}" if m else None


def matches(pepper: bytes, key: str, stored_digest: str) -> bool:
    """Constant-time comparison of a presented key with a stored digest."""
    return hmac.compare_digest(digest(pepper, key), stored_digest)
