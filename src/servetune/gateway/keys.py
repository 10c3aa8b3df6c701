"""API keys: stored hashed, compared in constant time, never logged.

A key is a random secret (``st-`` + 43 URL-safe base64 characters = 256 bits, made by
:func:`new_key`); only ``sha256:<hex of SHA-256(key)>`` is ever written down. A fast hash is
the right one for a 256-bit random secret (no dictionary to try), and it costs ~1 µs per
request. Keys shorter than :data:`MIN_KEY_CHARS` are refused: a guessable key is a password,
which this scheme is not for.

Lookup: the SHA-256 of the presented key is computed, its first 8 bytes pick a candidate in a
dict, and the full 32 bytes are compared with :func:`hmac.compare_digest` — the time taken
depends on neither the key nor how much of it matched. The plain key is not kept.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from servetune.errors import ConfigError

PREFIX = "sha256:"
MIN_KEY_CHARS = 20


def new_key() -> str:
    """A fresh 256-bit key: ``st-`` + URL-safe base64 (no padding)."""
    return "st-" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def hash_key(key: str) -> str:
    """The stored form of a key: ``sha256:<64 hex digits>``."""
    if len(key) < MIN_KEY_CHARS:
        raise ConfigError(
            f"an API key must have at least {MIN_KEY_CHARS} characters (got {len(key)})",
            hint="make one with `servetune gateway keygen`",
        )
    return PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_hashed(stored: str, where: str) -> bytes:
    """``sha256:<hex>`` → the 32-byte digest; anything else is a clear error."""
    text = stored.strip()
    if not text.startswith(PREFIX):
        raise ConfigError(
            f"{where}: a key in the configuration must be stored hashed ('sha256:<hex>')",
            hint="hash it with `servetune gateway hash-key` (reads the key from stdin)",
        )
    hexpart = text[len(PREFIX) :]
    try:
        digest = bytes.fromhex(hexpart)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ConfigError(f"{where}: 'sha256:' must be followed by 64 hex digits")
    return digest


@dataclass(frozen=True)
class KeyEntry:
    digest: bytes
    tenant: str
    """Tenant name, or ``""`` for an admin key."""
    admin: bool = False


class KeyRing:
    """Presented key → tenant (or admin), in constant time."""

    def __init__(self) -> None:
        self._by_prefix: dict[bytes, list[KeyEntry]] = {}
        self.count = 0
        self.tenant_keys = 0

    def add(self, digest: bytes, tenant: str, admin: bool = False) -> None:
        entries = self._by_prefix.setdefault(digest[:8], [])
        for e in entries:
            if hmac.compare_digest(e.digest, digest):
                if e.tenant != tenant or e.admin != admin:
                    who = "the admin" if e.admin else f"tenant {e.tenant!r}"
                    raise ConfigError(f"one API key is configured twice ({who} and {tenant!r})")
                return
        entries.append(KeyEntry(digest, tenant, admin))
        self.count += 1
        if not admin:
            self.tenant_keys += 1

    def lookup(self, presented: str | bytes) -> KeyEntry | None:
        raw = (
            presented.encode("utf-8", "surrogateescape")
            if isinstance(presented, str)
            else presented
        )
        digest = hashlib.sha256(raw).digest()
        found: KeyEntry | None = None
        # A prefix collision between two stored keys is astronomically unlikely, but the
        # loop compares every candidate in full anyway.
        for e in self._by_prefix.get(digest[:8], ()):
            if hmac.compare_digest(e.digest, digest):
                found = e
        return found

    def __len__(self) -> int:
        return self.count


def read_key_file(path: str | Path) -> list[tuple[str, str | None]]:
    """``KEY [TENANT]`` lines → [(stored hash, tenant or None)]. A plain key is hashed here and
    the plain text dropped; ``#`` starts a comment. Errors say file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"API key file {p}: no such file",
            hint="give a file of 'KEY [TENANT]' lines (servetune gateway keygen makes a key)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"API key file {p}: cannot be read ({exc})",
            hint="give a readable UTF-8 text file of 'KEY [TENANT]' lines",
        ) from None
    out: list[tuple[str, str | None]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 2:
            raise ConfigError(
                f"{p}:{n}: expected 'KEY [TENANT]', got {len(parts)} fields",
                hint="one key a line, optionally followed by its tenant's name",
            )
        key = parts[0]
        tenant = parts[1] if len(parts) == 2 else None
        if key.startswith(PREFIX):
            parse_hashed(key, f"{p}:{n}")
            out.append((key, tenant))
        else:
            try:
                out.append((hash_key(key), tenant))
            except ConfigError as exc:
                raise ConfigError(f"{p}:{n}: {exc.message}", exc.hint) from None
    if not out:
        raise ConfigError(f"API key file {p} holds no key", hint="one 'KEY [TENANT]' a line")
    return out
