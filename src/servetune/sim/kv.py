"""The KV block pool: vLLM's paged KV cache, with optional prefix caching.

Blocks are counted, not stored. A block is *used* while a running request holds it; free
blocks are either clean or cached (evictable, least recently freed first, like vLLM's free
block queue). With prefix caching, full prompt blocks are shared by content hash: a new
request whose first blocks hash alike reuses them (refcount), and a preempted request's
computed blocks stay cached under its own key until evicted, so its recompute is cheap while
the pool is not under pressure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class BlockPool:
    def __init__(self, num_blocks: int, caching: bool) -> None:
        self.total = num_blocks
        self.caching = caching
        self.used = 0
        self.cached_free = 0
        # key -> number of evictable blocks; a prompt-block hash holds 1, ("r", id) holds n
        self._lru: OrderedDict[Hashable, int] = OrderedDict()
        self._refs: dict[Hashable, int] = {}
        """Shared prompt blocks in use: hash -> refcount."""
        self.queries = 0
        self.hits = 0
        self.evicted = 0
        """Cached blocks evicted to make room (the prefix cache's losses under pressure)."""

    @property
    def free(self) -> int:
        """Blocks a request may take now (clean + evictable cached)."""
        return self.total - self.used

    @property
    def usage(self) -> float:
        return self.used / self.total if self.total else 0.0

    # --- plain blocks -------------------------------------------------------------------
    def allocate(self, n: int) -> None:
        """Take ``n`` blocks (the caller checked ``free``); evict cached ones if needed."""
        self.used += n
        over = self.used + self.cached_free - self.total
        if over <= 0:
            return
        lru = self._lru
        popitem = lru.popitem
        freed = 0
        while freed < over and lru:
            key, cnt = popitem(False)
            freed += cnt
        if freed > over:
            # evict from the end of the last request's chain; its prefix stays cached
            lru[key] = freed - over
            lru.move_to_end(key, last=False)
            freed = over
        self.cached_free -= freed
        self.evicted += freed

    def release(
        self, n: int, keep_as: Hashable | None = None, keys: Sequence[Hashable] = ()
    ) -> None:
        """Return ``n`` blocks; with caching and a key they stay reusable until evicted.
        ``keys``: the content keys of the first of them (full blocks whose content a later
        prompt may hold): those stay cached each under its own key, shareable like a prompt
        block (one already cached is a duplicate, freed); the rest are freed."""
        self.used -= n
        if n and keys and self.caching:
            lru, refs = self._lru, self._refs
            kept = 0
            for h in reversed(keys[:n]):  # tail first: the first evicted, as vLLM frees them
                if h in refs or h in lru:
                    continue
                lru[h] = 1
                kept += 1
            self.cached_free += kept
            return
        if n and keep_as is not None and self.caching:
            self._lru[keep_as] = self._lru.get(keep_as, 0) + n
            self.cached_free += n

    def take_cached(self, key: Hashable, max_blocks: int) -> int:
        """Reuse up to ``max_blocks`` blocks cached under ``key``; returns how many."""
        if not self.caching:
            return 0
        cnt = self._lru.pop(key, 0)
        take = min(cnt, max_blocks)
        self.cached_free -= cnt
        self.used += take
        return take

    def prewarm(self, keys: Sequence[Hashable]) -> int:
        """Mark blocks as computed and cached before anything runs (a server that served
        these prompts before); returns how many fitted."""
        if not self.caching:
            return 0
        n = 0
        for k in keys:
            if self.used + self.cached_free >= self.total:
                break
            if k not in self._lru:
                self._lru[k] = 1
                self.cached_free += 1
                n += 1
        return n

    def cached(self, key: Hashable) -> int:
        """Evictable blocks cached under ``key``."""
        return self._lru.get(key, 0)

    def evictable(self, hashes: Sequence[Hashable]) -> int:
        """How many of these cached prompt blocks are free (not held by anyone)."""
        return sum(1 for h in hashes if h not in self._refs)

    def drop_cached(self, key: Hashable) -> None:
        cnt = self._lru.pop(key, 0)
        self.cached_free -= cnt

    # --- shared prompt blocks -----------------------------------------------------------
    def match(self, hashes: Sequence[Hashable]) -> int:
        """How many leading prompt blocks are cached (in use or evictable)."""
        if not self.caching or not hashes:
            return 0
        n = 0
        for h in hashes:
            if h in self._refs or h in self._lru:
                n += 1
            else:
                break
        return n

    def acquire_shared(self, hashes: Sequence[Hashable]) -> int:
        """Hold the given cached blocks; returns how many were evictable (newly used)."""
        revived = 0
        for h in hashes:
            r = self._refs.get(h)
            if r is None:
                self._lru.pop(h)
                self.cached_free -= 1
                self.used += 1
                revived += 1
                self._refs[h] = 1
            else:
                self._refs[h] = r + 1
        return revived

    def publish(self, hashes: Sequence[Hashable]) -> list[Hashable]:
        """Private blocks just computed become shareable under their hashes; returns the
        hashes taken over (a hash another request already holds stays a private copy)."""
        out: list[Hashable] = []
        if not self.caching:
            return out
        refs, lru = self._refs, self._lru
        dropped = 0
        for h in hashes:
            if h in refs:
                continue
            if lru.pop(h, 0):  # an evictable copy of the same content: keep ours
                dropped += 1
            refs[h] = 1
            out.append(h)
        self.cached_free -= dropped
        return out

    def release_shared(self, hashes: Sequence[Hashable]) -> None:
        refs, lru = self._refs, self._lru
        freed = 0
        for h in reversed(hashes):
            r = refs[h] - 1
            if r:
                refs[h] = r
            else:
                del refs[h]
                lru[h] = 1
                freed += 1
        self.used -= freed
        self.cached_free += freed
