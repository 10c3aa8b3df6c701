"""Actions as data: what to change, by how much, in each engine's spelling, what to expect and
what it risks — ordered by the seed's cost order (1 quantize → 2 push GPU/KV use to 80%+ →
3 rate-limit at the knee → 4 only then add GPUs).

Each :class:`ActionSpec` names an engine-neutral knob (``servetune.engines.knobs``) or is an
operational step (a gateway cap, more load). Its new value comes from a *target* function
over the run's figures (e.g. double ``max_num_seqs`` but stay within what the KV pool holds);
when the GPU and model are known, memory actions quote the memory planner's before/after
KV pool. The seed's rules for any change are in :data:`PROCEDURE`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servetune.diagnose.conditions import fmt_num, fmt_value, render
from servetune.diagnose.figure_table import Figures
from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.model import Action
from servetune.errors import ServetuneError
from servetune.knobs import KnobValue, has, note, render_value, value_text
from servetune.knobs import flag as knob_flag
from servetune.sim.config import SIM_KNOBS, EngineConfig

ENGINES = ("vllm", "sglang", "tgi", "llama.cpp")

PROCEDURE = [
    "Change one knob at a time, on the same model and the same traffic; record the old value.",
    "Re-run the same load (servetune bench or servetune sweep with the same flags and no "
    "--seed, so that the server sees fresh prompts) and compare it with the old run: "
    "servetune compare OLD_DIR NEW_DIR gives P50/P99 TTFT, TPOT, throughput, KV and GPU use "
    "with 95% intervals and says which differences beat the run-to-run noise.",
    "Roll out through a canary: 5–10% of traffic through the gateway to the new config, roll "
    "back on anomalies, never at peak hours.",
    "After any quantization, run a quality regression (accuracy / perplexity / your own "
    "samples) before rollout.",
]

RATE_LIMIT_SHARE = 0.75
"""A single saturated run's rate limit: 75% of what it completed (a sweep finds the knee)."""

Move = tuple[KnobValue | None, KnobValue | None]
"""(from, to) for a knob; None where the value is unknown."""
Target = Callable[[Figures], Move | None]
"""The knob's move for this run, or None when the action does not apply to it."""


@dataclass(frozen=True)
class ActionSpec:
    id: str
    title: str
    """Template; ``{old}`` and ``{new}`` are the knob's values, ``{flag}`` its vLLM flag."""
    expected: str
    risk: str
    cost_step: int = 0
    knob: str | None = None
    target: Target | None = None
    verify: str = ""
    also: Callable[[Figures], dict[str, KnobValue]] | None = None
    """Knobs that change together with ``knob`` (one logical change)."""


# --- targets -------------------------------------------------------------------------------


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _double_seqs(fig: Figures) -> Move | None:
    cap = fig.get("max_num_seqs") or fig.get("running_cap")
    if not cap:
        return (None, None)
    new = int(cap) * 2
    pool = fig.get("pool_requests")
    if pool:
        # Stay where the pool still holds every running request at ~80% use.
        new = min(new, max(int(cap) + 1, int(pool * 0.8)))
    old = fig.get("max_num_seqs")
    return (_int(old), new)


def _seqs_to_pool(fig: Figures) -> Move | None:
    pool = fig.get("pool_requests")
    old = fig.get("max_num_seqs")
    running = fig.get("running_mean")
    if pool:
        new = max(1, int(pool * 0.9))
    elif running:
        new = max(1, int(running * 0.8))
    else:
        return (_int(old), None)
    if old is not None and new >= old:
        return None
    return (_int(old), new)


def _kv_fp8(fig: Figures) -> Move | None:
    if fig.get("kv_fp8"):
        return None
    return (fig.config.get("kv_cache_dtype") or "auto", "fp8")


def _weights(fig: Figures) -> Move | None:
    if fig.get("quantized"):
        return None
    new = "fp8"
    gpu = fig.config.gpu
    if gpu:
        from servetune.sim.catalog import find_gpu

        try:
            if find_gpu(gpu).fp8_tflops is None:
                new = "awq"
        except ServetuneError:
            pass
    return (fig.config.get("quantization"), new)


def _weights_for_speed(fig: Figures) -> Move | None:
    """Quantizing weights to relieve a saturated engine: only where it speeds the bound
    part up (fp8 tensor cores for compute-bound work; int4 for memory-bound decode)."""
    got = _weights(fig)
    if got is None:
        return None
    compute_bound = (fig.get("compute_use_est") or 0.0) >= 0.35 or (
        fig.get("gpu_utilization_mean") or 0.0
    ) >= 0.9
    if compute_bound and got[1] != "fp8":
        return None
    return got


def _util_up(fig: Figures) -> Move | None:
    old = fig.get("gpu_memory_utilization")
    if old is None:
        return (None, None)
    if old >= 0.95:
        return None
    for new in (min(0.95, round(old + 0.05, 2)), round(old + 0.03, 2), round(old + 0.02, 2)):
        if new <= old:
            continue
        if _plan_error(fig.config, "gpu_memory_utilization", new) is None:
            return (old, new)
    return None


def _util_down(fig: Figures) -> Move | None:
    old = fig.get("gpu_memory_utilization")
    if old is None:
        return (None, None)
    return (old, round(max(0.5, old - 0.05), 2))


def _max_model_len_down(fig: Figures) -> Move | None:
    old = fig.get("max_model_len")
    longest = fig.get("max_request_tokens")
    if old is None or longest is None:
        return (_int(old), None)
    new = int(math.ceil(longest * 1.25 / 1024) * 1024)
    if new >= old:
        return None
    return (int(old), new)


def _raise_mml(fig: Figures) -> Move | None:
    old = fig.get("max_model_len")
    need = fig.get("workload_request_max") or fig.get("max_request_tokens")
    if old is None or need is None or need <= old:
        return None
    return (int(old), int(math.ceil(need * 1.1 / 1024) * 1024))


def _chunked_on(fig: Figures) -> Move | None:
    if fig.get("enable_chunked_prefill") == 1:
        return None
    return (False if fig.has("enable_chunked_prefill") else None, True)


def _chunk_budget(fig: Figures) -> dict[str, KnobValue]:
    """With chunked prefill on, the step budget can drop to vLLM's default for the GPU
    (2048 on A100-class and smaller): without it, it had to hold a whole max-model-len."""
    old = fig.get("max_num_batched_tokens")
    budget = 2048
    gpu = fig.config.gpu
    if gpu:
        from servetune.sim.catalog import find_gpu
        from servetune.sim.config import batch_defaults

        try:
            budget = batch_defaults(find_gpu(gpu), "openai_api_server")[0]
        except ServetuneError:
            pass
    seqs = fig.get("max_num_seqs")
    if seqs is not None:
        budget = max(budget, int(seqs))
    if old is not None and old <= budget:
        return {}
    return {"max_num_batched_tokens": budget}


def _long_prefill_cap(fig: Figures) -> Move | None:
    budget = fig.get("max_num_batched_tokens") or 2048.0
    new = max(256, int(budget) // 4)
    old = fig.get("long_prefill_token_threshold")
    if old and old <= new:
        return None
    return (None if old is None else int(old), new)


def _smaller_steps(fig: Figures) -> Move | None:
    """Halve the step budget (chunked prefill on): a step that carries a prefill chunk holds
    the decodes about half as long. Never below the running cap or 512 tokens."""
    if fig.get("enable_chunked_prefill") == 0:
        return None
    old = fig.get("max_num_batched_tokens")
    if old is None:
        return (None, None)
    floor = max(512, int(fig.get("max_num_seqs") or 0))
    longest, limit = fig.get("stall_longest_ms"), fig.get("stall_limit_ms")
    if longest and limit and longest > limit:
        # a step's time grows with its tokens: scale the budget so the longest stall would
        # end below the stall limit (with a fifth to spare), down to a power of two
        want = old * 0.8 * limit / longest
        new = max(floor, 2 ** int(math.log2(max(want, 1.0))))
    else:
        new = max(floor, int(old) // 2)
    if new >= old:
        return None
    return (int(old), new)


def _tp_up(fig: Figures) -> Move | None:
    tp = fig.get("tensor_parallel_size")
    if tp is None:
        return (None, None)
    return (int(tp), int(tp) * 2)


def _served_rate(fig: Figures) -> Move | None:
    thr = fig.get("request_throughput")
    if thr is None:
        return (None, None)
    # The knee lies well below the saturation throughput (queueing delay grows like
    # 1 / (1 − utilisation)); a quarter below it is a safe start until a sweep finds the knee.
    return (None, round(thr * RATE_LIMIT_SHARE, 2))


def _mnbt_down(fig: Figures) -> Move | None:
    old = fig.get("max_num_batched_tokens")
    if old is None:
        return (None, None)
    return (int(old), max(2048, int(old) // 2))


def _same(fig: Figures) -> Move | None:
    return (None, None)


def _plan_error(config: KnownConfig, knob: str, value: KnobValue) -> str | None:
    """None when the planner accepts the config with ``knob = value``, else its message."""
    from servetune.sim.memory import plan_memory

    ec = config.engine_config
    if ec is None:
        return None
    try:
        plan_memory(ec.model_copy(update={knob: value}))
    except ServetuneError as exc:
        return exc.message
    return None


def what_if_pool(config: KnownConfig, knob: str, value: KnobValue) -> tuple[int, int] | str | None:
    """(KV pool tokens before, after) with ``knob = value`` from the memory planner; a message
    when it would not start; None when the GPU/model are unknown."""
    from servetune.sim.memory import plan_memory

    ec = config.engine_config
    if ec is None or knob not in SIM_KNOBS:
        return None
    try:
        before = plan_memory(ec).kv_cache_tokens
    except ServetuneError:
        return None
    try:
        changed = EngineConfig.model_validate({**ec.model_dump(), knob: value})
        after = plan_memory(changed).kv_cache_tokens
    except (ServetuneError, ValueError) as exc:
        msg = exc.message if isinstance(exc, ServetuneError) else str(exc)
        return f"the memory planner says it would not start: {msg}"
    return before, after


# --- per-engine spelling ----------------------------------------------------------------


def _value_for(engine: str, knob: str, value: KnobValue | None) -> str | None:
    """The flag and value ENGINE takes for KNOB = value (the registry's spelling), the flag
    alone when the value is unknown, or None when the engine has no such knob."""
    if not has(engine, knob):
        return None
    if value is None:
        return knob_flag(engine, knob)
    if knob == "enable_chunked_prefill" and engine == "sglang" and value:
        return "--chunked-prefill-size 8192"
    return render_value(engine, knob, value) or None


def engine_flags(knob: str, old: KnobValue | None, new: KnobValue | None) -> dict[str, str]:
    """engine → the exact change, vLLM first (None values: the flag to change, no number)."""
    out: dict[str, str] = {}
    for engine in ENGINES:
        spelled = _value_for(engine, knob, new)
        why = note(engine, knob)
        if spelled is None:
            out[engine] = f"no equivalent{f': {why}' if why else ''}"
            continue
        text = spelled
        if new is None:
            text = f"{spelled} (current value unknown)"
        elif old is not None and engine == "vllm":
            was = _value_for(engine, knob, old)
            if was and was != spelled:
                text = f"{spelled}  (was {was})"
        if why and engine != "vllm":
            text += f"  [{why}]"
        out[engine] = text
    return out


# --- the table ----------------------------------------------------------------------------

QUALITY = (
    "quality can drop: run a quality regression (accuracy / perplexity / your own samples) "
    "before rollout; if it drops, use a better quantization or go back to bf16"
)

ACTIONS: dict[str, ActionSpec] = {
    a.id: a
    for a in (
        ActionSpec(
            id="kv_cache_fp8",
            knob="kv_cache_dtype",
            target=_kv_fp8,
            cost_step=1,
            title="quantize the KV cache: {flag} fp8",
            expected="the KV pool holds about twice the tokens ({pool_change}): fewer "
            "preemptions, more requests at once",
            risk="fp8 KV adds quantization error (uncalibrated scales default to 1.0): " + QUALITY,
            verify="preemptions per second and P99 E2E on the same load",
        ),
        ActionSpec(
            id="quantize_weights",
            knob="quantization",
            target=_weights,
            cost_step=1,
            title="quantize the weights: {flag} {new}",
            expected="{quant_effect}; the KV pool gets the memory freed ({pool_change})",
            risk="AWQ/GPTQ need a pre-quantized checkpoint; fp8 on GPUs without fp8 tensor "
            "cores is weight-only; " + QUALITY,
            verify="KV pool size at start-up, then throughput and quality",
        ),
        ActionSpec(
            id="quantize_weights_for_speed",
            knob="quantization",
            target=_weights_for_speed,
            cost_step=1,
            title="quantize the weights: {flag} {new}",
            expected="{quant_effect}",
            risk="AWQ/GPTQ need a pre-quantized checkpoint; " + QUALITY,
            verify="the saturation throughput of a sweep",
        ),
        ActionSpec(
            id="raise_gpu_memory_utilization",
            knob="gpu_memory_utilization",
            target=_util_up,
            cost_step=2,
            title="raise {flag} {old} → {new}",
            expected="a bigger KV pool ({pool_change})",
            risk="less headroom outside the budget for CUDA graphs, NCCL buffers and other "
            "processes: out of memory at start or under load (the seed's OOM row); canary "
            "first",
            verify="the engine starts; preemptions and KV use under the same load",
        ),
        ActionSpec(
            id="raise_max_num_seqs",
            knob="max_num_seqs",
            target=_double_seqs,
            cost_step=2,
            title="raise {flag} {old} → {new}",
            expected="up to {new} requests run at once instead of queueing; while decode is "
            "memory-bound, throughput rises almost in proportion and KV use climbs toward "
            "80%",
            risk="each step carries more requests, so TPOT and the P99 tail rise; the "
            "sampler's logits buffer grows with it (OOM at start is possible); past what the "
            "pool holds it turns into preemptions — change it alone, canary first",
            verify="request throughput and P99 TPOT at the same offered load",
        ),
        ActionSpec(
            id="try_max_num_seqs",
            knob="max_num_seqs",
            target=_double_seqs,
            cost_step=2,
            title="find out: raise {flag} {old} → {new} on a canary and re-run the same load",
            expected="if throughput rises and TPOT stays acceptable, the GPU had room and the "
            "cap was the bottleneck; if throughput stays flat, compute is the limit — put it "
            "back",
            risk="TPOT and the tail rise with the batch; OOM at start is possible; record the "
            "old value",
            verify="request throughput at the same offered load (or measure GPU utilisation: "
            "--dcgm-url)",
        ),
        ActionSpec(
            id="lower_max_num_seqs",
            knob="max_num_seqs",
            target=_seqs_to_pool,
            cost_step=0,
            title="lower {flag} {old} → {new} (what the KV pool holds at the mean request size)",
            expected="requests wait in the queue instead of being preempted and recomputed; "
            "no work thrown away",
            risk="a lower cap lowers peak throughput when requests are short; queueing moves "
            "to TTFT",
            verify="preemptions per second (should reach 0) and P99 E2E",
        ),
        ActionSpec(
            id="lower_max_model_len",
            knob="max_model_len",
            target=_max_model_len_down,
            title="lower {flag} {old} → {new} (the longest request × 1.25)",
            expected="bounds the blocks one request can hold; in vLLM V1 it enlarges the pool "
            "only through a smaller activation peak ({pool_change})",
            risk="prompts + outputs longer than {new} tokens are refused (HTTP 400): set it "
            "from your real traffic, not from one test",
            verify="the KV pool at start-up and the refused requests",
        ),
        ActionSpec(
            id="raise_max_model_len",
            knob="max_model_len",
            target=_raise_mml,
            title="raise {flag} {old} → {new} (the longest request × 1.1)",
            expected="the longest requests are served instead of refused ({pool_change})",
            risk="one request may hold more of the KV pool; the engine refuses to start if one "
            "such sequence does not fit",
            verify="no HTTP 400 for long requests",
        ),
        ActionSpec(
            id="lower_gpu_memory_utilization",
            knob="gpu_memory_utilization",
            target=_util_down,
            title="lower {flag} {old} → {new}",
            expected="more memory left outside vLLM's budget (CUDA graphs, NCCL, other "
            "processes): the out-of-memory error goes away",
            risk="a smaller KV pool: fewer requests at once, preemption sooner",
            verify="the engine starts and serves the same load without OOM",
        ),
        ActionSpec(
            id="lower_max_num_batched_tokens",
            knob="max_num_batched_tokens",
            target=_mnbt_down,
            title="lower {flag} {old} → {new}",
            expected="a smaller activation peak per step (memory) and shorter steps",
            risk="lower prefill throughput; TTFT of long prompts rises",
            verify="start-up memory and TTFT",
        ),
        ActionSpec(
            id="enable_chunked_prefill",
            knob="enable_chunked_prefill",
            target=_chunked_on,
            also=_chunk_budget,
            title="enable chunked prefill: {flag}{also_flags}",
            expected="a long prompt is split into chunks that run beside the decodes: running "
            "streams stall for at most one chunk step instead of the whole prefill"
            "[[ (longest stall now {itl_max_ms:ms})]]",
            risk="the long prompt's own TTFT grows a little; a very small token budget lowers "
            "throughput; in vLLM V1 short prompts can still wait behind a long prompt's "
            "chunks — capping the input length bounds that",
            verify="the longest gap between two tokens and P99 TPOT at the same load",
        ),
        ActionSpec(
            id="long_prefill_threshold",
            knob="long_prefill_token_threshold",
            target=_long_prefill_cap,
            title="cap one prompt's share of each step: {flag} {new} (vLLM V1)",
            expected="a long prompt's prefill takes at most {new} tokens of each step, so the "
            "short prompts behind it are prefilled in the same steps instead of waiting for "
            "all its chunks",
            risk="the long prompt's own TTFT grows (more, smaller chunks); with a very small "
            "cap, prefill throughput drops",
            verify="P99 TTFT of the short prompts at the same load",
        ),
        ActionSpec(
            id="shrink_prefill_steps",
            knob="max_num_batched_tokens",
            target=_smaller_steps,
            title="shorten the steps that carry prefill: lower {flag} {old} → {new}",
            expected="each step computes at most {new} tokens, so a step that carries "
            "prefill holds the running streams back for a fraction of the time (a step's time "
            "grows with its tokens)[[; the longest stall now {stall_longest_ms:ms}]]",
            risk="prefill throughput drops and long prompts' TTFT grows (more, smaller "
            "chunks); below the running batch it caps decode too",
            verify="the longest gap between two tokens, P99 ITL and TPOT, and TTFT at the "
            "same load",
        ),
        ActionSpec(
            id="cap_input_length",
            title="cap the prompt length per request at the gateway (e.g. at your P99 prompt "
            "length; now up to {input_len_max:tok} tokens)",
            expected="bounds the longest prefill and the stall it causes; protects everyone "
            "else from one huge prompt",
            risk="refuses legitimate long prompts: choose the cap from real traffic",
            verify="the longest TTFT and stall",
        ),
        ActionSpec(
            id="rate_limit",
            target=_served_rate,
            cost_step=3,
            title="rate-limit at the gateway to ≤ {new} req/s (75% of what the saturated "
            "server completed; the knee of a sweep gives the exact limit)",
            expected="the queue stops growing: TTFT returns to what the server does below "
            "capacity; excess requests are refused early (429) instead of waiting minutes",
            risk="refused requests must be retried or routed elsewhere; find the real knee "
            "with a sweep (servetune sweep --request-rates auto) before fixing the limit",
            verify="waiting requests flat and P99 TTFT at the limited rate",
        ),
        ActionSpec(
            id="rate_limit_at_knee",
            target=_same,
            cost_step=3,
            title="rate-limit at the knee: ≤ {knee_rate} req/s (comfortable concurrency "
            "≈ {knee_conc})",
            expected="traffic stays on the flat part of the curve: P99 latency near {knee_p99}",
            risk="the excess must be refused, queued at the gateway or sent to another replica",
            verify="P99 latency and throughput at the limit",
        ),
        ActionSpec(
            id="add_gpus",
            knob="tensor_parallel_size",
            target=_tp_up,
            cost_step=4,
            title="only then add GPUs: {flag} {old} → {new}, or another replica behind the gateway",
            expected="more memory and compute per replica ({pool_change}) or twice the "
            "capacity with a second replica",
            risk="the most expensive step: take it only after steps 1–3 (the seed: most "
            "waste is GPUs bought and 30% used)",
            verify="the knee moves to a higher rate",
        ),
        ActionSpec(
            id="add_load",
            cost_step=2,
            title="send more load: sweep the rate upward to find the knee "
            "(servetune sweep --request-rates auto)",
            expected="throughput rises with the rate until the knee; in production, put more "
            "traffic on fewer replicas until KV/GPU use reaches ~80%",
            risk="none for a test; in production, consolidate step by step and watch P99",
            verify="the knee of the sweep",
        ),
        ActionSpec(
            id="quality_regression",
            title="run a quality regression of the quantized model (accuracy / perplexity / "
            "your own samples) against the bf16 baseline",
            expected="a load test cannot see quality; this does",
            risk="if quality drops: a better quantization (e.g. Q4_K_M → Q5_K_M, int4 → fp8) "
            "or back to bf16",
            verify="the quality metric of your task",
        ),
        ActionSpec(
            id="fresh_prompts",
            title="re-run with prompts the server has not seen: leave out --seed (a fresh one "
            "is drawn per run and per sweep level), or restart the server between runs",
            expected="TTFT and throughput of traffic the cache cannot answer; the hit rate "
            "falls to what the workload implies",
            risk="none",
            verify="the run's prefix-cache hit rate is within what its workload implies",
        ),
        ActionSpec(
            id="fix_client",
            title="give the load generator more room: more --workers, or run it on its own host",
            expected="the planned rate is really offered; the figures describe the server",
            risk="none",
            verify="client send lag P99 < 5 ms and achieved ≥ 97% of the target rate",
        ),
    )
}


def build_action(spec_id: str, fig: Figures, extra: dict[str, Any] | None = None) -> Action | None:
    """The action for this run, or None when it does not apply (e.g. already quantized)."""
    spec = ACTIONS[spec_id]
    old: KnobValue | None = None
    new: KnobValue | None = None
    if spec.target is not None:
        got = spec.target(fig)
        if got is None:
            return None
        old, new = got
    values: dict[str, Any] = dict(extra or {})
    values["flag"] = (knob_flag("vllm", spec.knob) or "") if spec.knob else ""
    values["old"] = "?" if old is None else value_text(old)
    if new is None:
        values["new"] = "2× the current value" if spec.knob else "?"
    else:
        values["new"] = value_text(new)
    if spec.id == "raise_max_num_seqs" and new is None:
        values["new"] = "2× the current cap"
    pool_note = "planner figures need the GPU and the model"
    if spec.knob is not None and new is not None:
        change = what_if_pool(fig.config, spec.knob, new)
        if isinstance(change, tuple):
            a, b = change
            pct = (b - a) / a if a else 0.0
            pool_note = f"KV pool {fmt_num(a)} → {fmt_num(b)} tokens, {pct:+.0%}"
        elif isinstance(change, str):
            pool_note = change
    also = spec.also(fig) if spec.also is not None else {}
    values["also_flags"] = "".join(
        f" {render_value('vllm', k, v)}" for k, v in also.items() if has("vllm", k)
    )
    values["pool_change"] = pool_note
    values["quant_effect"] = _quant_effect(new)
    extra = _as_extra(values)
    title = render(spec.title, fig, extra) or spec.title.split("{")[0].strip()
    expected = _render_optional(spec.expected, fig, extra)
    risk = _render_optional(spec.risk, fig, extra)
    flags = engine_flags(spec.knob, old, new) if spec.knob else {}
    for k, v in also.items():
        for engine, text in engine_flags(k, fig.get(k), v).items():
            main = flags.get(engine, "")
            if main and not main.startswith("no equivalent") and not text.startswith("no "):
                flags[engine] += f" + {text}"
    if spec.knob == "enable_chunked_prefill" and "max_num_batched_tokens" in also:
        # SGLang's chunk size is the per-step prefill budget itself.
        flags["sglang"] = f"--chunked-prefill-size {also['max_num_batched_tokens']}"
    return Action(
        id=spec.id,
        title=title,
        knob=spec.knob,
        from_value=old,
        to_value=new,
        also=also,
        flags=flags,
        expected=expected,
        risk=risk,
        cost_step=spec.cost_step,
        verify=spec.verify,
    )


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]")


def _render_optional(template: str, fig: Figures, extra: dict[str, Any]) -> str:
    """Render; parts in [[…]] are dropped when a figure they name is missing."""

    def part(m: re.Match[str]) -> str:
        return render(m.group(1), fig, extra) or ""

    filled = _OPTIONAL.sub(part, template)
    return render(filled, fig, extra) or filled


def _quant_effect(new: KnobValue | None) -> str:
    if new is None:
        return "quantized weights take less memory"
    if new == "fp8":
        return (
            "fp8 weights take half the memory and run the matmuls on fp8 tensor cores (up to "
            "~2× the compute of bf16)"
        )
    return (
        "int4 weights (AWQ/GPTQ) take about a quarter of the memory and speed up memory-bound "
        "decode; compute-bound prefill does not get faster on a GPU without fp8 tensor cores"
    )


def _as_extra(values: dict[str, Any]) -> dict[str, Any]:
    # Plain strings and numbers: render() formats numbers by spec, strings as they are.
    return {k: (fmt_value(v, "num") if isinstance(v, float) else v) for k, v in values.items()}


def apply_action(cfg: EngineConfig, action: Action) -> EngineConfig:
    """``cfg`` with the action's knob set to its new value (for re-running a scenario)."""
    if action.knob is None or action.to_value is None:
        raise ValueError(f"action {action.id} changes no knob to a known value")
    changes = {action.knob: action.to_value}
    changes.update(action.also)
    return EngineConfig.model_validate({**cfg.model_dump(), **changes})
