"""The fields of a request that bound how much an engine generates, read as one bound.

Engines honour several names for the same bound, and prefer them in different orders:

- ``max_tokens`` — every OpenAI-compatible engine;
- ``max_completion_tokens`` — OpenAI's chat name; vLLM (and the simulated engine) prefer it
  to ``max_tokens`` when both are given;
- ``n_predict`` — llama.cpp's own name, preferred by its server to ``max_tokens``;
- ``max_new_tokens`` — TGI's and SGLang's native name.

and fields that multiply or hold up the output:

- ``n``, ``best_of`` — sequences generated (vLLM's beam search is ``n`` wide), each up to the
  bound: the charge is the bound × the larger of the two (× the prompts of a batched
  completions request);
- ``min_tokens`` — a floor the engine must reach before it may stop (vLLM refuses a floor
  above the bound).

The gateway reads them all (:func:`read_bounds`), takes the tightest length the client asked
for, caps it, reserves it × the choices and forwards exactly one field, ``max_tokens`` — the
others are removed (:func:`forward_bounds`), so what an engine generates is never more than
what was charged, whichever name it prefers. The body is always re-encoded from what the
gateway parsed: the engine cannot read a duplicated key or an escaped key name differently
from the gateway.
"""

from __future__ import annotations

from typing import Any, NamedTuple

LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict", "max_new_tokens")
"""Names of the output length bound, each honoured by some engine."""
CHOICE_FIELDS = ("n", "best_of")
"""Sequences generated per prompt."""


class BoundError(ValueError):
    """A bound field of the wrong type or range (the gateway answers 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class Bounds(NamedTuple):
    max_tokens: int | None
    """The tightest length the client asked for (None: it gave none)."""
    choices: int
    """Sequences per prompt: max(``n``, ``best_of``)."""
    min_tokens: int | None
    """The floor asked for (None: none)."""
    given: tuple[str, ...]
    """The bound fields the body holds (to be removed or rewritten before forwarding)."""


def _int(body: dict[str, Any], name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BoundError(f"'{name}' must be an integer, got {type(v).__name__}", name)
    if v < minimum:
        raise BoundError(f"'{name}' must be at least {minimum}, got {v}", name)
    return v


def read_bounds(body: dict[str, Any]) -> Bounds:
    """Every output bound of ``body``, checked; the tightest length, the choices, the floor."""
    asked: int | None = None
    given: list[str] = []
    for name in LENGTH_FIELDS:
        if name in body:
            given.append(name)
            v = _int(body, name, 1)
            if v is not None and (asked is None or v < asked):
                asked = v
    choices = 1
    for name in CHOICE_FIELDS:
        v = _int(body, name, 1)
        if v is not None and v > choices:
            choices = v
    floor = None
    if "min_tokens" in body:
        given.append("min_tokens")
        floor = _int(body, "min_tokens", 0)
    if floor is not None and asked is not None and floor > asked:
        raise BoundError(
            f"'min_tokens' {floor} is over the output bound {asked} the request asks for",
            "min_tokens",
        )
    return Bounds(asked, choices, floor, tuple(given))


def forward_bounds(body: dict[str, Any], bounds: Bounds, max_tokens: int | None) -> None:
    """Rewrite ``body`` to carry one bound: ``max_tokens`` (what was capped and reserved; None:
    no bound, the engine's own default), the other length names removed, ``min_tokens`` no
    higher than it."""
    for name in bounds.given:
        del body[name]
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    floor = bounds.min_tokens
    if floor is not None:
        body["min_tokens"] = floor if max_tokens is None else min(floor, max_tokens)
