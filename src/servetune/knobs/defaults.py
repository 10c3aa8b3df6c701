"""Defaults that are rules rather than constants, written once (the simulated engine, the
diagnosis and the tuner read them from here).

vLLM's scheduler budget (``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``)
for the OpenAI API server (``vllm serve``) and the offline ``LLM`` class:

=====================================================  =================  ==============
device                                                 server (tok/seqs)  LLM class
=====================================================  =================  ==============
≥ 160 GiB (B200, B300) — newer releases (seen in 0.32)  16384 / 1024       16384 / 1024
≥ 70 GiB and the name has no "a100" (H100, H200)        8192 / 1024        16384 / 1024
any other GPU (A100 excluded on purpose, vLLM PR       2048 / 256         8192 / 256
#17885: a large budget lowered its throughput)
vLLM's CPU build (× the world size)                    2048 / 128         4096 / 256
=====================================================  =================  ==============

Before V1 (vLLM < 0.8, or ``VLLM_USE_V1=0``) ``max_num_seqs`` was 256 everywhere and the
token budget ``max(max_model_len, 2048)`` without chunked prefill (2048 with it). V1 turns
chunked prefill and prefix caching on by default; with chunked prefill off the budget must
still hold one whole ``max_model_len`` prompt, so it becomes ``max(max_model_len, default)``
(vLLM's SchedulerConfig rule).
"""

from __future__ import annotations

from servetune.knobs.model import DefaultContext, parse_version

LARGE_DEVICE_GIB = 70.0
HUGE_DEVICE_GIB = 160.0
V1_SINCE = "0.8.0"
"""The first vLLM release that runs the V1 engine by default."""
HUGE_DEVICE_SINCE = "0.12.0"
"""The ≥ 160 GiB row: present in 0.32, absent in 0.11; the exact release is not pinned."""


def _is_v0(ctx: DefaultContext) -> bool:
    return ctx.version is not None and ctx.version < parse_version(V1_SINCE)


def vllm_batch_defaults(
    device_name: str | None,
    device_gib: float | None,
    usage: str = "openai_api_server",
    version: tuple[int, ...] | None = None,
    cpu: bool = False,
    world_size: int = 1,
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM V1 picks them (see the module table).
    An unknown device gets the "any other GPU" row, as vLLM does when it cannot ask."""
    server = usage == "openai_api_server"
    if cpu:
        return ((2048 if server else 4096) * world_size, (128 if server else 256) * world_size)
    gib = device_gib or 0.0
    name = (device_name or "").lower()
    huge_known = version is None or version >= parse_version(HUGE_DEVICE_SINCE)
    if gib >= HUGE_DEVICE_GIB and huge_known:
        return 16384, 1024
    if gib >= LARGE_DEVICE_GIB and "a100" not in name:
        return (8192 if server else 16384), 1024
    return (2048 if server else 8192), 256


def max_num_seqs_default(ctx: DefaultContext, cpu: bool = False) -> int:
    if _is_v0(ctx):
        return 256
    return vllm_batch_defaults(ctx.device_name, ctx.device_gib, ctx.usage, ctx.version, cpu)[1]


def max_num_batched_tokens_default(ctx: DefaultContext, cpu: bool = False) -> int | None:
    chunked = ctx.chunked_prefill if ctx.chunked_prefill is not None else not _is_v0(ctx)
    if _is_v0(ctx):
        if chunked:
            return 2048
        return None if ctx.max_model_len is None else max(ctx.max_model_len, 2048)
    tokens = vllm_batch_defaults(ctx.device_name, ctx.device_gib, ctx.usage, ctx.version, cpu)[0]
    if chunked:
        return tokens
    return None if ctx.max_model_len is None else max(ctx.max_model_len, tokens)


def vllm_cpu_max_num_seqs(ctx: DefaultContext) -> int:
    return max_num_seqs_default(ctx, cpu=True)


def vllm_cpu_max_num_batched_tokens(ctx: DefaultContext) -> int | None:
    return max_num_batched_tokens_default(ctx, cpu=True)


def v1_on(ctx: DefaultContext) -> bool:
    """On in V1 (chunked prefill, prefix caching), off in V0."""
    return not _is_v0(ctx)


ASYNC_DEFAULT_AFTER = "0.11.0"
"""vLLM PR #27614 turned async scheduling on by default in the releases after 0.11.0."""


def async_default(ctx: DefaultContext) -> bool | None:
    """vLLM's async scheduling: on after 0.11.0; None without a version (the simulated engine
    then takes its GPU calibration's, ``efficiency.json``)."""
    if ctx.version is None:
        return None
    return ctx.version > parse_version(ASYNC_DEFAULT_AFTER)
