"""Rendezvous (highest-random-weight) hashing: the upstreams in a key's own order.

Each upstream has a seed (a stable hash of its name); a key ranks the upstreams by a 64-bit
mix of key and seed. Every process that knows the same upstream names ranks them alike, with
no state shared; when an upstream leaves, only the keys it ranked first move (each to its
second), and they come back when it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

_M = (1 << 64) - 1


def mix(x: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit value of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def weight(key: int, seed: int) -> int:
    return mix(key ^ seed)


def best(key: int, seeds: Sequence[int], among: Sequence[int]) -> int:
    """The index in ``among`` (indices into ``seeds``) the key ranks first."""
    top = among[0]
    top_w = -1
    for i in among:
        w = mix(key ^ seeds[i])
        if w > top_w:
            top, top_w = i, w
    return top


def order(key: int, seeds: Sequence[int]) -> list[int]:
    """All indices of ``seeds``, the key's first choice first."""
    return sorted(range(len(seeds)), key=lambda i: mix(key ^ seeds[i]), reverse=True)
