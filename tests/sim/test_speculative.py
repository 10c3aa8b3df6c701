"""Speculative decoding in the simulated engine, each part against its closed form: the
i.i.d. acceptance model's mean gain, the gain stream's distribution, a request's steps and
tokens, the step's verification and draft costs, the MTP layer's memory, and the refusals."""

from __future__ import annotations

import math
import re

import pytest
from pydantic import ValidationError

from servetune.arch.weights import mtp_layer_weights
from servetune.errors import SimError
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig, refusal
from servetune.sim.engine import Engine, SimRequest
from servetune.sim.memory import plan_memory
from servetune.sim.offline import simulate
from servetune.sim.perf import StepModel
from servetune.sim.speculative import (
    GainStream,
    Speculation,
    default_acceptance,
    expected_tokens,
    rate_for_length,
)

R1 = dict(gpu="H200", model="deepseek-ai/DeepSeek-R1", tensor_parallel_size=8, max_model_len=8192)


def test_expected_tokens_is_the_geometric_sum() -> None:
    for a in (0.0, 0.3, 0.72, 0.85, 0.99):
        for k in (1, 2, 3, 5):
            assert expected_tokens(a, k) == pytest.approx(sum(a**j for j in range(k + 1)))
    assert expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.0, 3) == 1.0
    for k, length in ((1, 1.85), (3, 2.61), (7, 3.53)):
        assert expected_tokens(rate_for_length(length, k), k) == pytest.approx(length)


def test_default_acceptance_follows_the_measurements() -> None:
    a1, src1 = default_acceptance("mtp", 1)
    assert a1 == pytest.approx(0.85) and "DeepSeek-V3" in src1
    a3, src3 = default_acceptance("deepseek_mtp", 3)
    assert expected_tokens(a3, 3) == pytest.approx(2.61) and "sgl-cookbook" in src3
    a2, src2 = default_acceptance("mtp", 2)
    assert a2 == pytest.approx((a1 + a3) / 2) and "interpolated" in src2
    assert default_acceptance("mtp", 5)[0] == pytest.approx(a3)  # the nearest measured
    with pytest.raises(SimError, match="spec_acceptance_rate A"):
        default_acceptance("ngram", 3)


def test_the_gain_stream_draws_accepted_prefix_plus_one() -> None:
    """P(gain = j + 1) = a^j (1 − a) for j < k, a^k for k + 1; the mean (1 − a^(k+1))/(1 − a)."""
    a, k, n = 0.7, 3, 40_000
    g = GainStream(Speculation(method="mtp", k=k, acceptance=a, acceptance_source="t"), seed=1)
    g.ensure(n)
    gains = [g.G[i + 1] - g.G[i] for i in range(n)]
    for j in range(k + 1):
        p = a**j * (1 - a) if j < k else a**k
        got = gains.count(j + 1) / n
        assert abs(got - p) < 4 * math.sqrt(p * (1 - p) / n), (j, got, p)
    assert set(gains) <= set(range(1, k + 2))
    mean = sum(gains) / n
    assert mean == pytest.approx(expected_tokens(a, k), rel=0.02)
    # finish_step: the first step whose gains reach the remaining tokens
    for s0, rem in ((0, 1), (5, 17), (100, 300)):
        f = g.finish_step(s0, rem)
        assert g.G[f + 1] - g.G[s0] >= rem > g.G[f] - g.G[s0]


def _alone(spec: dict[str, object], max_tokens: int = 129) -> tuple[Engine, SimRequest]:
    e = EngineConfig(**R1, **spec)  # type: ignore[arg-type]
    r = e.resolve()
    eng = Engine(r, plan_memory(r))
    req = SimRequest(0, 1000, max_tokens, 0.0)
    eng.add(req)
    while not eng.idle():
        eng.advance()
    return eng, req


def test_a_request_alone_gains_k_plus_one_tokens_a_step_at_acceptance_one() -> None:
    """Acceptance 1: the prefill's token, then ⌈(N − 1)/(k + 1)⌉ decode steps, the last cut
    at max_tokens; every step one chunk; the tokens counted are the request's."""
    n, k = 129, 3
    eng, req = _alone(
        {"speculative_method": "mtp", "num_speculative_tokens": k, "spec_acceptance_rate": 1.0}, n
    )
    assert req.out == n and req.finish_reason == "length"
    steps = 1 + math.ceil((n - 1) / (k + 1))
    assert len(eng.token_times_ns(req)) == steps == eng.counters.steps
    assert eng.counters.generation_tokens == n == sum(eng.step_tokens)
    assert eng.pool.used == 0  # every block it took was given back


def test_acceptance_zero_gains_one_token_a_step_at_the_verification_cost() -> None:
    """Acceptance 0: one token a step as without speculation, each step dearer (k + 1 tokens
    verified, the drafter's k passes): the same step count, a longer decode."""
    n = 65
    plain, r0 = _alone({}, n)
    spec, r1 = _alone(
        {"speculative_method": "mtp", "num_speculative_tokens": 2, "spec_acceptance_rate": 0.0}, n
    )
    assert r1.out == n and plain.counters.steps == spec.counters.steps == n
    t0, t1 = plain.token_times_ns(r0), spec.token_times_ns(r1)
    assert t1[-1] - t1[0] > t0[-1] - t0[0]


def test_tpot_is_the_step_time_over_the_tokens_a_step_gives() -> None:
    """vLLM's TPOT ((E2E − TTFT)/(n − 1)) shrinks by the tokens a step gives; its ITL (the gap
    between chunks, one chunk a step) is the step time, so mean ITL ≈ E × mean TPOT."""
    cfg = BenchConfig(num_prompts=64, random_input_len=512, random_output_len=257, request_rate=2)
    spec = EngineConfig(**R1, speculative_method="mtp", num_speculative_tokens=2)  # type: ignore[arg-type]
    res = simulate(cfg, spec)
    e = expected_tokens(default_acceptance("mtp", 2)[0], 2)
    s = res.summary
    assert s.completed == 64
    assert s.itl.mean / s.tpot.mean == pytest.approx(e, rel=0.1)
    plain = simulate(cfg, EngineConfig(**R1))  # type: ignore[arg-type]
    assert s.tpot.mean < plain.summary.tpot.mean / 1.4


def test_decode_step_verifies_k_plus_one_tokens_and_runs_the_drafter() -> None:
    """The decode step's fixed part at n requests: the dense roofline and the experts at
    n·(k + 1) tokens, plus k passes of one MTP layer over n tokens (draft_time)."""
    k = 2
    base = StepModel(EngineConfig(**R1).resolve())  # type: ignore[arg-type]
    r = EngineConfig(  # type: ignore[arg-type]
        **R1, speculative_method="mtp", num_speculative_tokens=k, async_scheduling=False
    ).resolve()
    m = StepModel(r)
    assert m.verify == k + 1 and m.draft_passes == k
    n = 16
    t = n * (k + 1)
    lin = m.linear_flops_per_token * m.padded(t) + m.head_flops_per_sample * t
    dense = max(lin / m.flops_per_s, m.weight_bytes / m.bytes_per_s)
    moe = max(
        m.expert_flops_per_token * t / m.expert_flops_per_s,
        m.expert_bytes * m.weights.expert_coverage(t) / m.bytes_per_s,
    )
    gpu = dense + moe + m.comm_fixed_s + m.comm_per_token * m.padded(t) + m.draft_time(n)
    co = m.decode_coeffs(n)
    assert co.f0 == pytest.approx(gpu + m.fixed_s + m.per_seq_s * n)
    # one pass: the MTP layer's bytes and the shared lm_head, its experts at coverage(n)
    dense_b, experts_b = mtp_layer_weights(r.model, r.quantization, r.parallelism)
    one_dense = max(
        m.draft_flops_per_token * n / m.flops_per_s,
        (dense_b + m.weights.head) / m.bytes_per_s,
    )
    one_exp = max(
        m.draft_expert_flops_per_token * n / m.expert_flops_per_s,
        experts_b * m.weights.expert_coverage(n) / m.bytes_per_s,
    )
    one = one_dense + one_exp + m.comm_fixed_s / 61 + m.comm_per_token / 61 * n
    assert m.draft_time(n) == pytest.approx(k * one)
    # k + 1 queries over the context, the MTP layer's k passes over it too
    assert m.attn_flops_per_ctx == pytest.approx(base.attn_flops_per_ctx * (k + 1 + k / 61))
    assert m.kv_bytes_per_token == pytest.approx(base.kv_bytes_per_token * (1 + k / 61))


def test_ngram_drafts_on_the_cpu() -> None:
    r = EngineConfig(  # type: ignore[arg-type]
        **R1, speculative_method="ngram", num_speculative_tokens=3, spec_acceptance_rate=0.5
    ).resolve()
    m = StepModel(r)
    assert m.verify == 4 and m.draft_passes == 0 and m.draft_time(64) == 0.0
    assert r.speculation is not None and r.speculation.acceptance_source == "--spec-acceptance-rate"


def test_the_mtp_layer_is_loaded_as_the_draft() -> None:
    plain = plan_memory(EngineConfig(**R1).resolve())  # type: ignore[arg-type]
    r = EngineConfig(**R1, speculative_method="mtp").resolve()  # type: ignore[arg-type]
    spec = plan_memory(r)
    dense, experts = mtp_layer_weights(r.model, r.quantization, r.parallelism)
    assert (spec.weights_gib - plain.weights_gib) * 2**30 == pytest.approx(dense + experts)
    assert spec.kv_cache_tokens < plain.kv_cache_tokens
    # one MTP layer of DeepSeek-V3 is ~11.7 B parameters beyond the embeddings (FP8: 1 byte)
    assert 8 * (dense + experts) / 1e9 == pytest.approx(11.5, rel=0.1)
    assert r.defaults_applied["num_speculative_tokens"] == 1  # vLLM: the MTP layers it has


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (
            {
                "model": "Qwen/Qwen2.5-7B-Instruct",
                "tensor_parallel_size": 4,
                "speculative_method": "mtp",
            },
            "no multi-token",
        ),
        ({"speculative_method": "ngram", "num_speculative_tokens": 3}, "spec_acceptance_rate A"),
        ({"speculative_method": "ngram"}, "needs num_speculative_tokens"),
        ({"num_speculative_tokens": 2}, "num_speculative_tokens without a speculative decoding"),
        ({"spec_acceptance_rate": 0.8}, "spec_acceptance_rate without a speculative decoding"),
        ({"speculative_method": "mtp", "spec_acceptance_rate": 1.5}, r"in \[0, 1\]"),
        ({"speculative_method": "mtp", "num_speculative_tokens": 20}, r"in \[1, 16\]"),
    ],
)
def test_what_the_simulator_cannot_draft_is_refused(kw: dict[str, object], words: str) -> None:
    """Refused by the model when it needs no catalog (a ValidationError, shown over fields),
    else when resolved (a SimError)."""
    args = {**R1, "model": "deepseek-ai/DeepSeek-R1", **kw}
    try:
        EngineConfig(**args).resolve()  # type: ignore[arg-type]
    except ValidationError as exc:
        err = refusal(exc)
    except SimError as exc:
        err = exc
    else:
        raise AssertionError("not refused")
    assert re.search(words, f"{err.message} {err.hint}"), err.message


def test_an_eagle_head_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="EAGLE head is another model"):
        EngineConfig(**R1, speculative_method="eagle3")  # type: ignore[arg-type]


def test_the_vllm_line_carries_the_speculative_config() -> None:
    args = EngineConfig(**R1, speculative_method="mtp", num_speculative_tokens=2).vllm_args()  # type: ignore[arg-type]
    i = args.index("--speculative-config")
    assert args[i + 1] == '{"method": "mtp", "num_speculative_tokens": 2}'
    assert "--speculative-config" not in EngineConfig(**R1).vllm_args()  # type: ignore[arg-type]


def test_sim_serve_refuses_speculative_decoding() -> None:
    from servetune.sim.server import SimServer

    with pytest.raises(SimError, match="speculative"):
        SimServer(EngineConfig(**R1, speculative_method="mtp"))  # type: ignore[arg-type]


def test_the_same_seed_simulates_the_same() -> None:
    cfg = BenchConfig(num_prompts=40, random_input_len=256, random_output_len=64, request_rate=8)
    e = EngineConfig(**R1, speculative_method="mtp", num_speculative_tokens=3)  # type: ignore[arg-type]
    a, b = simulate(cfg, e), simulate(cfg, e)
    assert a.summary.tpot.mean == b.summary.tpot.mean
    assert a.summary.output_throughput == b.summary.output_throughput
