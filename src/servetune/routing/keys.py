"""What a policy keys on: a request's session and the block hashes of its prompt.

Block keys are *chained*: the key of block ``i`` stands for the block and every block before
it (the running CRC-32 and Adler-32 of the prompt's bytes up to the block's end, one 64-bit
int), so two prompts share block ``i``'s key only when they share the whole prefix up to it —
as an engine's prefix cache keys its blocks. The hashes are stable across processes (no
``PYTHONHASHSEED``), so gateway replicas that share no state compute the same keys.
"""

from __future__ import annotations

import hashlib
import zlib

DEFAULT_CHUNK_BYTES = 64
"""Bytes per index block: about 16 tokens of English text (~4 bytes a token), vLLM's block."""


def prompt_blocks(data: bytes, chunk: int = DEFAULT_CHUNK_BYTES) -> list[int]:
    """One chained key per full ``chunk`` of ``data`` (a partial last chunk has none: an
    engine caches full blocks only)."""
    n = len(data) // chunk
    out: list[int] = []
    crc = 0
    adler = 1
    crc32, adler32 = zlib.crc32, zlib.adler32
    mv = memoryview(data)
    for i in range(n):
        piece = mv[i * chunk : (i + 1) * chunk]
        crc = crc32(piece, crc)
        adler = adler32(piece, adler)
        out.append((crc << 32) | adler)
    return out


def stable_hash(data: bytes) -> int:
    """A 64-bit hash of ``data``, the same in every process."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def chat_text(messages: list[object]) -> bytes:
    """The bytes of a chat's messages as a prefix cache sees them: role and text of each, in
    order (a chat template renders them so; what it adds is the same for every request)."""
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        parts.append(str(m.get("role", "")))
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for p in content:
                if isinstance(p, dict) and isinstance(p.get("text"), str):
                    parts.append(p["text"])
    return "\x1e".join(parts).encode("utf-8", "replace")
