"""Seeds: a fresh one per run unless the user fixes it, and one of its own for every sweep level.

Why: a server with a prefix cache (vLLM V1 has it on by default, SGLang's RadixAttention,
llama.cpp's slot cache) answers a prompt it has seen from its cache. A run that sends the
prompts of an earlier run — or a sweep level that sends the prompts of the level before it —
measures that cache, not the server. So

- ``bench`` without ``--seed`` draws a fresh seed (recorded in ``run.json``; pass it back
  with ``--seed`` to repeat the very same prompts and arrivals);
- a sweep draws (or takes) one seed and gives every level and every repeat its own,
  :func:`derive_seed` of the sweep's seed and the level's label: reproducible, recorded in
  each level's ``run.json``, and distinct prompts at every level; a level re-run after it
  was cut short (``--resume``) draws yet other prompts (:func:`attempt_seed`).
"""

from __future__ import annotations

import hashlib
import secrets

SEED_BITS = 31
"""Seeds stay below 2**31: numpy, Python and JSON readers all take them as they are."""


def fresh_seed() -> int:
    """A seed from the operating system's entropy."""
    return secrets.randbelow(1 << SEED_BITS)


def derive_seed(base: int, *parts: str | int) -> int:
    """A seed of its own for ``parts`` (a level label, a repeat), stable across runs and
    machines: the first 31 bits of BLAKE2b over the base seed and the parts."""
    text = "\x1f".join(str(p) for p in (base, *parts)).encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


MAX_ATTEMPTS = 64
"""How many re-runs of one sweep level :func:`attempt_of` recognises."""


def attempt_seed(level_seed: int, attempt: int) -> int:
    """The seed of a level's ``attempt``-th run (0: the level's own seed). A level cut short
    (a kill, Ctrl-C, a failure) had sent some of its prompts, which a server's prefix cache may
    still hold: its re-run on ``--resume`` draws other prompts."""
    return level_seed if attempt == 0 else derive_seed(level_seed, "attempt", attempt)


def attempt_of(level_seed: int, seed: int) -> int | None:
    """Which attempt of the level ``seed`` is the seed of, or None if it is none of them."""
    for k in range(MAX_ATTEMPTS + 1):
        if attempt_seed(level_seed, k) == seed:
            return k
    return None
