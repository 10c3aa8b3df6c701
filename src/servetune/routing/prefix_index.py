"""An approximate prefix index of one upstream: the prompt blocks routed there, LRU.

It is built from what was routed, not read from the engine, so it is an estimate: it bounds
itself by the upstream's KV pool (``capacity`` blocks of the index's size), forgetting the
least recently routed blocks first — as the engine evicts. A prompt's blocks are touched last
block first, so the first blocks of a prompt are the most recent and are forgotten last: what
the index holds of a prompt is always a prefix of it, and a match is a binary search.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixIndex:
    __slots__ = ("_lru", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def match(self, blocks: Sequence[int]) -> int:
        """How many leading blocks of ``blocks`` the index holds."""
        lru = self._lru
        if not blocks or blocks[0] not in lru:
            return 0
        lo, hi = 1, len(blocks)  # blocks[:lo] held; find the first not held in [lo, hi)
        while lo < hi:
            mid = (lo + hi) // 2
            if blocks[mid] in lru:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def add(self, blocks: Sequence[int]) -> None:
        """The blocks of a prompt just routed here (most recent: its first block)."""
        lru = self._lru
        move = lru.move_to_end
        for k in reversed(blocks):
            if k in lru:
                move(k)
            else:
                lru[k] = None
        over = len(lru) - self.capacity
        popitem = lru.popitem
        for _ in range(over if over > 0 else 0):
            popitem(last=False)

    def clear(self) -> None:
        self._lru.clear()
