"""SGLang's scheduler policy in the simulated engine: admission by the estimated new-token
ratio (closed-form boundaries), the ratio's decay and reset, retraction, prefill before
decode, chunked prefill, the radix cache at token granularity, the running-request cap."""

from __future__ import annotations

import pytest

from servetune.sim.config import EngineConfig
from servetune.sim.engine import DECODE, PREFILL, WAITING, SimRequest
from servetune.sim.memory import plan_memory
from servetune.sim.policies import make_engine
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.sched_sglang import (
    CLIP_MAX_NEW_TOKENS,
    SglangEngine,
    new_token_ratios,
    retract_ratio,
)


def engine(pool_tokens: int, **kw: object) -> SglangEngine:
    cfg = EngineConfig(engine="sglang", gpu="H100-SXM", model="Qwen3-0.6B", **kw)  # type: ignore[arg-type]
    r: ResolvedConfig = cfg.resolve()
    mem = plan_memory(r)
    mem = mem.model_copy(update={"engine_blocks": pool_tokens // r.block_size})
    eng = make_engine(r, mem)
    assert isinstance(eng, SglangEngine)
    return eng


def run_until(eng: SglangEngine, cond: object, limit: int = 100_000) -> None:
    for _ in range(limit):
        if cond():  # type: ignore[operator]
            return
        eng.advance()
    raise AssertionError("condition not reached")


def test_ratio_constants() -> None:
    init, low, decay = new_token_ratios(1.0)
    assert (init, low) == (0.7, pytest.approx(0.098))
    assert decay == pytest.approx((0.7 - 0.098) / 600)
    assert new_token_ratios(2.0)[0] == 1.0  # capped
    assert retract_ratio([100, 300], [1000, 1000]) == pytest.approx((400 + 40) / 2000)
    assert retract_ratio([990], [1000]) == 1.0


@pytest.mark.parametrize("prompt,admitted", [(5900, True), (5901, False)])
def test_admission_reserves_the_running_requests_future(prompt: int, admitted: bool) -> None:
    """Pool 10,000 tokens; A (1,000 + up to 3,000 out) runs with 2,999 tokens to go, so it
    reserves 0.7 × 2,999 = 2,099.3; B (prompt p, 1,000 out) is admitted iff
    p + 1,000 < 10,000 − 1,000 − 2,099.3, i.e. p ≤ 5,900."""
    eng = engine(10_000)
    a = SimRequest(0, 1000, 3000, 0.0)
    eng.add(a)
    eng.advance()  # A's prefill batch
    assert a.state == DECODE and a.out == 1
    b = SimRequest(1, prompt, 1000, 0.0)
    eng.add(b)
    eng.advance(collect=True)
    assert (b.state != WAITING) == admitted
    assert eng.batch_is_full == (not admitted)
    if not admitted:
        assert b.state == WAITING
        # nothing more is tried until a running request leaves: decode steps run
        eng.advance(collect=True)
        assert b.state == WAITING and a.o0 + eng.step - a.s0 == 3


@pytest.mark.parametrize("prompt,admitted", [(16932, True), (16933, False)])
def test_future_tokens_are_clipped(prompt: int, admitted: bool) -> None:
    """A running request with 99,999 tokens to go reserves 0.7 × min(99,999, 4096) =
    2,867.2 of a 20,000-token pool, so B (prompt p, 100 out) is admitted iff
    p + 100 < 20,000 − 100 − 2,867.2, i.e. p ≤ 16,932."""
    eng = engine(20_000)
    a = SimRequest(0, 100, 100_000, 0.0)
    eng.add(a)
    eng.advance()
    assert a.state == DECODE and eng.n_long == 1
    b = SimRequest(1, prompt, 100, 0.0)
    eng.add(b)
    eng.advance(collect=True)
    assert (b.state != WAITING) == admitted
    assert CLIP_MAX_NEW_TOKENS == 4096


def test_ratio_decays_per_decode_step_and_resets_when_idle() -> None:
    eng = engine(100_000)
    init, low, decay = new_token_ratios(1.0)
    req = SimRequest(0, 100, 300, 0.0)
    eng.add(req)
    eng.advance()  # prefill: no decay
    assert eng.ratio == init
    steps = 0
    while req.state == DECODE and steps < 50:
        eng.advance(collect=True)  # one decode step at a time
        steps += 1
    assert eng.ratio == pytest.approx(max(init - decay * steps, low))
    run_until(eng, lambda: eng.idle())
    eng.advance()
    assert eng.ratio == init


def test_retraction_frees_the_fewest_output_and_recomputes() -> None:
    eng = engine(3000, schedule_conservativeness=0.0)
    a = SimRequest(0, 400, 2000, 0.0)
    b = SimRequest(1, 400, 2000, 0.0)
    eng.add(a)
    eng.advance()  # alone: 400 + 2000 < 3000
    eng.add(b)
    eng.advance(collect=True)  # ratio 0: a running request reserves nothing, B goes
    assert a.state == DECODE and b.state == DECODE
    run_until(eng, lambda: eng.counters.preemptions > 0)
    # equal outputs: the longer prompt, then the later one in the sorted order goes first
    assert eng.retractions == 1
    victim = a if a.state == WAITING else b
    keep = b if victim is a else a
    assert keep.state == DECODE and victim.computed == 0
    assert eng.ratio == pytest.approx(
        retract_ratio([keep.o0 + eng.step - 1 - keep.s0], [keep.max_tokens])
    )
    assert eng.pool.cached(("r", victim.id)) == 0  # its KV was dropped, not cached
    run_until(eng, lambda: a.state == 3 and b.state == 3)
    for req in (a, b):
        assert req.out == 2000 and req.finish_reason == "length"
        times = list(eng.token_times_ns(req))
        assert len(times) == 2000 and times == sorted(times)


def test_prefill_runs_before_decode_and_decoders_skip_its_step() -> None:
    eng = engine(100_000)
    a = SimRequest(0, 100, 50, 0.0)
    eng.add(a)
    eng.advance()
    eng.advance(collect=True)
    eng.advance(collect=True)
    before = a.out
    eng.add(SimRequest(1, 2000, 50, eng.now))
    step = eng.step
    eng.advance(collect=True)  # a prefill batch: A makes no token
    assert eng.step == step + 1 and a.out in (before, a.o0)
    run_until(eng, lambda: a.state == 3)
    times = list(eng.token_times_ns(a))
    assert len(times) == 50
    assert int(eng.step_end_ns[step]) not in times  # the prefill step's end is not A's


def test_chunked_prefill_one_chunk_a_step() -> None:
    eng = engine(100_000, chunked_prefill_size=4096)
    req = SimRequest(0, 10_000, 5, 0.0)
    eng.add(req)
    for done in (4096, 8192):
        eng.advance()
        assert req.computed == done and req.state == PREFILL and req.first_token is None
    eng.advance()
    assert req.computed == 10_000 and req.out == 1 and req.first_token is not None


def test_prefill_batch_capped_by_max_prefill_tokens() -> None:
    eng = engine(1_000_000, max_num_batched_tokens=3000)
    reqs = [SimRequest(i, 1000, 10, 0.0) for i in range(5)]
    for r in reqs:
        eng.add(r)
    eng.advance()
    assert [r.state for r in reqs].count(DECODE) == 3  # 3 × 1,000 ≤ 3,000, the 4th waits


def test_max_running_requests() -> None:
    eng = engine(1_000_000, max_num_seqs=2)
    reqs = [SimRequest(i, 100, 30, 0.0) for i in range(3)]
    for r in reqs:
        eng.add(r)
    eng.advance()
    assert [r.state for r in reqs] == [DECODE, DECODE, WAITING]
    run_until(eng, lambda: reqs[2].state != WAITING)
    assert reqs[0].state == 3 or reqs[1].state == 3


@pytest.mark.parametrize("radix", [True, False])
def test_radix_cache_matches_token_by_token(radix: bool) -> None:
    eng = engine(100_000, enable_prefix_caching=radix)
    shared = [("t", i) for i in range(700)]
    a = SimRequest(0, 1000, 5, 0.0, hashes=[*shared, *[("a", i) for i in range(300)]])
    eng.add(a)
    run_until(eng, lambda: a.state == 3)
    b = SimRequest(1, 1001, 5, eng.now, hashes=[*shared, *[("b", i) for i in range(301)]])
    eng.add(b)
    eng.advance()
    assert b.cached == (700 if radix else 0)


def test_an_aborted_chunked_request_leaves_the_chunk() -> None:
    eng = engine(100_000, chunked_prefill_size=1024)
    big = SimRequest(0, 5000, 5, 0.0)
    small = SimRequest(1, 100, 3, 0.0)
    eng.add(big)
    eng.advance()
    assert eng.chunk_req is big
    eng.abort(big)
    assert eng.chunk_req is None and big.finish_reason == "abort"
    eng.add(small)
    run_until(eng, lambda: small.state == 3)
    assert small.out == 3
