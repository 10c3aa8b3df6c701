"""The engine profiles, registered once: the one list every other module asks.

profile("llama.cpp").launch.name_flag      # "-a"
profile("llamacpp").id                     # "llama.cpp" (an alias, read)
recognise(["trtllm-serve", "m", "--port", "1"])   # (PROFILES[trtllm], "trtllm-serve", …)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePath

from servetune.errors import ConfigError
from servetune.profiles import llama_cpp, sglang, sim, tgi, trtllm, vllm, vllm_cpu
from servetune.profiles.failures import COMMON
from servetune.profiles.metric_map import EngineMap
from servetune.profiles.model import EngineProfile, FailurePattern

PROFILES: tuple[EngineProfile, ...] = (
    vllm.PROFILE,
    vllm_cpu.PROFILE,
    sim.PROFILE,
    sglang.PROFILE,
    tgi.PROFILE,
    llama_cpp.PROFILE,
    trtllm.PROFILE,
)
"""Every engine, in the order lists and help show them."""

ENGINE_IDS: tuple[str, ...] = tuple(p.id for p in PROFILES)
NEUTRAL = vllm.PROFILE.id
"""The engine whose spellings the engine-neutral knob names are (vLLM's): a diagnosis spells
its actions in it first."""
_BY_NAME: dict[str, EngineProfile] = {
    **{a: p for p in PROFILES for a in p.aliases},
    **{p.id: p for p in PROFILES},
}


def profile(engine: str) -> EngineProfile:
    """The profile of ENGINE (its id, or an alias such as ``llamacpp``); a ConfigError
    listing the engines otherwise."""
    found = _BY_NAME.get(engine.strip().lower())
    if found is None:
        raise ConfigError(
            f"unknown engine {engine!r}",
            hint=f"choose one of: {', '.join(ENGINE_IDS)}",
            code="knob.unknown",
        )
    return found


def find(engine: str | None) -> EngineProfile | None:
    """The profile of ENGINE, or None (an unknown or missing name)."""
    return None if engine is None else _BY_NAME.get(engine.strip().lower())


def canonical(engine: str) -> str:
    """ENGINE's one spelling (``llamacpp`` → ``llama.cpp``); an unknown name as it is."""
    found = find(engine)
    return found.id if found else engine


def where(predicate: str) -> tuple[str, ...]:
    """The ids of the profiles whose boolean field PREDICATE is true (``memory_model``)."""
    return tuple(p.id for p in PROFILES if getattr(p, predicate))


def failure_patterns(engine: str | None) -> tuple[FailurePattern, ...]:
    """ENGINE's own start-failure patterns, then the common ones."""
    own = find(engine)
    return (*(own.failures if own else ()), *COMMON)


def metric_maps() -> tuple[EngineMap, ...]:
    """Every metric-name map, each once, in profile order (the more specific version first
    within an engine)."""
    seen: dict[int, EngineMap] = {}
    for p in PROFILES:
        for m in p.metrics.maps:
            seen.setdefault(id(m), m)
    return tuple(seen.values())


def metric_map(name: str) -> EngineMap:
    """A metric-name map by its own name (``vllm-0.8-v0``, ``llama.cpp-old``; an engine's
    alias works in place of its id: ``llamacpp-old``)."""
    key = name.strip().lower().replace(" ", "-")
    by_name = {m.name: m for m in metric_maps() if m.name}
    if key in by_name:
        return by_name[key]
    for p in PROFILES:
        for alias in p.aliases:
            if key == alias or key.startswith(alias + "-"):
                fixed = p.id + key[len(alias) :]
                if fixed in by_name:
                    return by_name[fixed]
    raise ConfigError.over_fields(
        f"unknown engine {name!r}",
        hint=f"use one of: {', '.join(by_name)} (or {{metrics_url}}=URL to read the names a "
        "running server exposes)",
    )


def metric_map_names() -> tuple[str, ...]:
    return tuple(m.name for m in metric_maps() if m.name)


def _subcommand(p: EngineProfile, rest: list[str]) -> tuple[str, ...] | None:
    """The subcommand of P that REST starts with (the longest first), or None."""
    options = p.entry.subcommands or ((),)
    for sub in sorted(options, key=len, reverse=True):
        if tuple(rest[: len(sub)]) == sub:
            return sub
    return None


def recognise(tokens: list[str]) -> tuple[EngineProfile, str, list[str], str | None] | None:
    """Whose command line TOKENS is: (the profile, the entry in words, the tokens after the
    entry, a positional model), or None when no profile recognises it."""
    if not tokens:
        return None
    first = PurePath(tokens[0]).name
    for i, tok in enumerate(tokens):
        if tok != "-m" or i + 1 >= len(tokens):
            continue
        module = tokens[i + 1]
        for p in PROFILES:
            if not any(module == m or module.startswith(m + ".") for m in p.entry.modules):
                continue
            tail = tokens[i + 2 :]
            sub = p.entry.module_subcommands
            if tuple(tail[: len(sub)]) != sub:
                continue
            words = " ".join((p.entry.command[0], *sub)) if sub else f"python -m {module}"
            return p, words, tail[len(sub) :], None
    for p in PROFILES:
        if not any(first.startswith(prog) for prog in p.entry.programs):
            continue
        found = _subcommand(p, tokens[1:])
        if found is None:
            continue
        rest = tokens[1 + len(found) :]
        model = None
        if p.entry.model_flag is None and rest and not rest[0].startswith("-"):
            model = rest.pop(0)
        return p, " ".join((first, *found)), rest, model
    return None


def entry_examples() -> Iterator[str]:
    """Each recognisable engine's command line as a person types it (for hints)."""
    for p in PROFILES:
        if p.entry.programs or p.entry.modules:
            model = "MODEL" if p.entry.model_flag is None else f"{p.entry.model_flag} MODEL"
            yield f"{' '.join(p.entry.command)} {model} …"
