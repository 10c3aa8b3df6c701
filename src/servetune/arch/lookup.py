"""Finding a catalog entry by name: case-insensitive, by its name or any alias (a Hugging Face
id or its last part), with the closest names suggested when none matches."""

from __future__ import annotations

import difflib
from typing import Protocol, TypeVar

from servetune.errors import SimError


class CatalogEntryNotFound(SimError):
    """An unknown GPU or model name."""

    default_code = "sim.catalog"


def norm(s: str) -> str:
    """The form names are compared in (case, underscores and spaces do not matter)."""
    return s.strip().lower().replace("_", "-").replace(" ", "-")


class Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def aliases(self) -> list[str]: ...


E = TypeVar("E", bound=Named)


def match(name: str, entries: tuple[E, ...], what: str, flag: str) -> E:
    """The entry called ``name``; else :class:`CatalogEntryNotFound` naming the closest."""
    key = norm(name)
    for entry in entries:
        names = [entry.name, *entry.aliases]
        if any(norm(n) == key for n in names):
            return entry
        # a Hugging Face id's last part matches too
        if any(norm(n).split("/")[-1] == key for n in names):
            return entry
    known = [x.name for x in entries]
    pool = {norm(n): x.name for x in entries for n in [x.name, *x.aliases]}
    close = difflib.get_close_matches(key, list(pool), n=3, cutoff=0.5)
    suggestions = list(dict.fromkeys(pool[c] for c in close))
    hint = (
        f"did you mean {', '.join(suggestions)}? " if suggestions else ""
    ) + f"known: {', '.join(known)} (servetune sim {what}s)"
    raise CatalogEntryNotFound(f"unknown {what} {name!r} for {flag}", hint=hint)
