"""Align prompt lengths with the server's own tokenizer (its ``/tokenize`` endpoint).

Prompts made from words (the ``random`` and ``prefix`` datasets under the approximate
counter) are resized until the server counts the planned length: scaled by the observed
tokens-per-word ratio first, then adjusted word by word. Other datasets keep their text and
only take the server's counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from servetune.workload.spec import RequestSpec

Counter = Callable[[str], Awaitable[int | None]]
_ROUNDS = 6
_PARALLEL = 16


def _resize(words: list[str], n_words: int, filler: list[str]) -> list[str]:
    if n_words <= len(words):
        return words[: max(1, n_words)]
    extra = n_words - len(words)
    return words + [filler[i % len(filler)] for i in range(extra)]


async def _align_one(spec: RequestSpec, count: Counter, resize: bool) -> RequestSpec:
    text = spec.prompt
    if text is None or not resize:
        n = await count(spec.text())
        return spec if n is None else spec.model_copy(update={"input_len": n})
    target = spec.input_len
    words = text.split(" ")
    filler = words[: max(1, min(len(words), 64))]
    n = await count(text)
    for _ in range(_ROUNDS):
        if n is None or n == target:
            break
        if n > 0 and abs(n - target) > 2:
            want = max(1, round(len(words) * target / n))
        else:
            want = len(words) + (1 if n < target else -1)
        words = _resize(words, want, filler)
        text = " ".join(words)
        n = await count(text)
    if n is None:
        return spec
    return spec.model_copy(update={"prompt": text, "input_len": n})


async def align_with_server(
    specs: list[RequestSpec], count: Counter, resize: bool
) -> tuple[list[RequestSpec], int]:
    """Specs with server-counted lengths; returns them and how many still miss the plan."""
    sem = asyncio.Semaphore(_PARALLEL)
    cache: dict[int, RequestSpec] = {}

    async def one(s: RequestSpec) -> RequestSpec:
        key = id(s)
        if key in cache:
            return cache[key]
        async with sem:
            out = await _align_one(s, count, resize)
        cache[key] = out
        return out

    out = await asyncio.gather(*(one(s) for s in specs))
    missed = sum(
        1 for a, b in zip(specs, out, strict=True) if resize and a.input_len != b.input_len
    )
    return list(out), missed
