"""Recognise why an engine failed to start, from its log.

Each :class:`FailurePattern` is a regular expression over one log line, a kind, and a hint.
The first pattern (in list order: the specific before the generic) that matches any line wins,
and the error quotes that line. Patterns were taken from the engines' own messages
(vLLM's config and KV-cache checks, argparse, clap, llama.cpp's loader and server).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class FailurePattern:
    kind: str
    regex: re.Pattern[str]
    hint: str


def _p(kind: str, pattern: str, hint: str) -> FailurePattern:
    return FailurePattern(kind, re.compile(pattern, re.IGNORECASE), hint)


PATTERNS: list[FailurePattern] = [
    _p(
        "max_model_len_too_large",
        r"max_model_len.*(greater than|exceeds|larger than).*(derived|max_position|model)",
        "lower max_model_len to what the model supports",
    ),
    _p(
        "kv_cache_too_small",
        r"(larger than the available KV cache memory|KV cache is needed"
        r"|No available memory for the cache blocks|insufficient .*KV cache"
        r"|not enough KV cache|estimated maximum model length is"
        r"|VLLM_CPU_KVCACHE_SPACE.*(too small|not enough|insufficient))",
        "lower max_model_len, or give the KV cache more memory (gpu_memory_utilization; "
        "on vLLM's CPU build the engine option cpu_kv_cache_gib)",
    ),
    _p(
        "out_of_memory",
        r"(out of memory|OutOfMemoryError|failed to allocate|cannot allocate memory"
        r"|std::bad_alloc|unable to allocate)",
        "the engine ran out of memory: lower max_num_seqs, max_model_len or "
        "max_num_batched_tokens, or use a smaller / quantized model",
    ),
    _p(
        "unknown_argument",
        r"(unrecognized arguments?:|invalid argument:|unexpected argument|unknown argument"
        r"|no such option|error: argument [^ ]+: )",
        "the engine does not accept a flag: check its version and the extra arguments",
    ),
    _p(
        "port_in_use",
        r"(address already in use|couldn't bind HTTP server socket|failed to bind)",
        "the port is taken: choose another, or let servetune pick a free one",
    ),
    _p(
        "model_not_loadable",
        r"(failed to load model|error loading model|unable to load model"
        r"|is not a valid model|Can't load the (model|configuration)"
        r"|No such file or directory.*(config\.json|\.gguf|\.safetensors)"
        r"|does not appear to have a file named)",
        "check the model path and that its format suits the engine (HF folder or GGUF)",
    ),
    _p(
        "servetune_error",
        r"^servetune [a-z-]+( [a-z-]+)?: error: ",
        "see the simulated engine's message",
    ),
]


MAX_QUOTE = 600  # characters of a log line quoted in an error


@dataclass(frozen=True)
class StartFailure:
    kind: str
    line: str
    hint: str


def recognise(lines: Iterable[str]) -> StartFailure | None:
    """The most specific failure any of LINES shows, quoting the first line that shows it."""
    best: tuple[int, StartFailure] | None = None
    for line in lines:
        text = line.strip()
        if not text:
            continue
        for rank, pat in enumerate(PATTERNS):
            if best is not None and rank >= best[0]:
                break
            if pat.regex.search(text):
                best = (rank, StartFailure(pat.kind, _clip(text), pat.hint))
                break
    return best[1] if best else None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 1] + "…"


_ERRORISH = re.compile(r"(error|exception|fatal|abort|failed)", re.IGNORECASE)


def last_error_line(lines: list[str]) -> str | None:
    """When nothing is recognised: the last line that looks like an error, else the last line."""
    for line in reversed(lines):
        if _ERRORISH.search(line):
            return _clip(line.strip())
    for line in reversed(lines):
        if line.strip():
            return _clip(line.strip())
    return None
