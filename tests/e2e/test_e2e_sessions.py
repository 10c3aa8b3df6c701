"""Sessions against real vLLM (CPU build) with ``--enable-prompt-tokens-details``: every answer
says how many of its prompt tokens came from the prefix cache, and the record keeps it; the
later turns of a conversation hit on the turns before them; the client-seen hit rate agrees
with vLLM's own counters; and the simulated engine, given the same workload and vLLM's block
size, predicts the hit rate within 10 points.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

import pytest
from real_engines import unexpected_failures

from servetune.engines import EngineProcess, provisioned
from servetune.loadgen.bench import bench
from servetune.results.conversation import MultiturnConfig
from servetune.results.io import read_records
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

pytestmark = pytest.mark.real_engine


def _cfg(eng: EngineProcess, tiny: provisioned.TinyModel) -> BenchConfig:
    return BenchConfig(
        base_url=eng.base_url,
        model="tiny",
        dataset_name="multiturn",
        multiturn=MultiturnConfig(
            turns_min=3, turns_max=3, system_prompt_len=300, system_prompts=2, think_time_s=0.0
        ),
        random_input_len=40,
        random_output_len=16,
        ignore_eos=True,
        num_prompts=6,
        request_rate=3.0,
        tokenizer=str(tiny.hf_dir),
        seed=2311,
        request_timeout_s=300.0,
    )


def test_cached_tokens_per_request_and_the_simulator_agrees(
    vllm8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    cfg = _cfg(vllm8, tiny)
    run = bench(cfg, tmp_path / "vllm", progress=False, metrics_interval_s=0.5)
    assert not unexpected_failures(tmp_path / "vllm", "vllm-cpu")
    recs = read_records(tmp_path / "vllm")
    assert len(recs) == 18
    assert all(r.cached_tokens is not None for r in recs), "vLLM said nothing of its cache"
    assert run.server is not None
    block = int(run.server.summary.get("kv_block_size") or 128)
    by: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in recs:
        by[r.session or ""].append(r)
    for turns in by.values():
        turns.sort(key=lambda r: r.turn or 0)
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.cached_tokens is not None and nxt.prompt_tokens is not None
            assert prev.prompt_tokens is not None and prev.output_tokens is not None
            # the previous prompt is cached, in whole blocks, and never all of this one
            assert nxt.cached_tokens % block == 0
            assert nxt.cached_tokens >= (prev.prompt_tokens // block) * block
            assert nxt.cached_tokens < nxt.prompt_tokens
    cache = run.summary.cache
    assert cache is not None and cache.hit_rate is not None and cache.requests_reporting == 18
    served = run.server.summary.get("prefix_cache_hit_rate")
    assert isinstance(served, float)
    # vLLM counts queries per scheduling (the same tokens); the window may cut a scrape
    assert cache.hit_rate == pytest.approx(served, abs=0.08), (cache.hit_rate, served)
    assert cache.hit_rate_later_turns is not None and cache.hit_rate_later_turns > 0.5
    # the simulated engine on the same workload, vLLM's block size, a pool as roomy
    sim_cfg = cfg.model_copy(update={"base_url": None})
    sim = simulate(sim_cfg, EngineConfig(block_size=block, max_model_len=2048))
    predicted = sim.summary.cache
    assert predicted is not None and predicted.hit_rate is not None
    print(
        f"hit rate: vLLM answers {cache.hit_rate:.3f}, vLLM counters {served:.3f}, "
        f"simulated {predicted.hit_rate:.3f} (block {block})"
    )
    assert abs(predicted.hit_rate - cache.hit_rate) <= 0.10, (predicted.hit_rate, cache.hit_rate)
