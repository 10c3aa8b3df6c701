"""Fresh prompts: every run and every sweep level draws its own, so that a server's prefix
cache cannot answer one level with another's prompts; and what share of prompt tokens a
workload itself lets a prefix cache serve."""

from __future__ import annotations

import math

import pytest

from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import PlannedLevel
from servetune.sweep.levels import level_config, plan_levels, probe_level
from servetune.workload.datasets import build_dataset
from servetune.workload.prefix_share import (
    TOLERANCE,
    hit_rate_ceiling,
    implied_hit_rate,
    workload_facts,
)
from servetune.workload.seeds import derive_seed, fresh_seed
from servetune.workload.tokens import ApproxTokenizer

TOK = ApproxTokenizer()


def _cfg(**kw: object) -> BenchConfig:
    base: dict[str, object] = {"random_input_len": 256, "random_output_len": 16, "seed": 3}
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(7, "rate-8") == derive_seed(7, "rate-8")
    seeds = {derive_seed(7, f"rate-{r}") for r in range(200)}
    assert len(seeds) == 200
    assert derive_seed(7, "rate-8") != derive_seed(8, "rate-8")
    assert all(0 <= s < 2**31 for s in seeds)
    assert fresh_seed() != fresh_seed() or fresh_seed() != fresh_seed()


def test_random_prompts_share_nothing_among_themselves() -> None:
    reqs = build_dataset(_cfg(), TOK, 100)
    assert implied_hit_rate(reqs) == 0.0


def test_the_same_prompts_twice_are_half_cacheable() -> None:
    reqs = build_dataset(_cfg(), TOK, 50)
    rate = implied_hit_rate(reqs + reqs)
    # Every full 16-word block of the second copy hits: ≤ 15 words a prompt are left over.
    assert 0.45 <= rate <= 0.5


def test_one_seed_shares_prefixes_across_input_lengths() -> None:
    """What made sweeps measure the cache: prompts drawn with the same seed at other lengths
    start with the same tokens."""
    long = build_dataset(_cfg(random_input_len=512), TOK, 20)
    short = build_dataset(_cfg(random_input_len=256), TOK, 20)
    assert implied_hit_rate(long + short) > 0.05


def test_prefix_dataset_implies_its_shared_share() -> None:
    cfg = _cfg(dataset_name="prefix", prefix_len=256, prefix_num_groups=4, random_input_len=256)
    reqs = build_dataset(cfg, TOK, 200)
    # (n − G)/n of the requests find their group's 256-word prefix: ≈ 0.98 × 256/512.
    expected = (200 - 4) / 200 * 256 / 513
    assert implied_hit_rate(reqs) == pytest.approx(expected, abs=0.03)


def test_every_level_and_repeat_draws_its_own_prompts() -> None:
    """Levels of one sweep send disjoint prompts: together they imply no cache hit (on the old
    main every level had the sweep's seed, and the concatenation was ~(L−1)/L cacheable)."""
    base = _cfg()
    levels = [probe_level(), *plan_levels("rate", [2.0, 4.0, 8.0], repeats=2)]
    cfgs = [level_config(base, lv) for lv in levels]
    seeds = [c.seed for c in cfgs]
    assert len(set(seeds)) == len(seeds)
    assert all(
        c.seed == derive_seed(base.seed, lv.label) for c, lv in zip(cfgs, levels, strict=True)
    )
    together = [r for c in cfgs for r in build_dataset(c, TOK, 30)]
    assert implied_hit_rate(together) == 0.0
    # Reproducible: the same sweep seed gives each level the same prompts again.
    again = level_config(base, PlannedLevel(label="rate-4", mode="rate", value=4.0))
    assert again.seed == cfgs[3].seed


def test_ceiling_allows_for_the_chat_template() -> None:
    assert hit_rate_ceiling(0.0, 1000, chat=False) == pytest.approx(TOLERANCE)
    assert hit_rate_ceiling(0.0, 64, chat=True) == pytest.approx(0.5 + TOLERANCE)
    assert hit_rate_ceiling(0.9, 64, chat=True) == 1.0


def test_workload_facts_record_the_seed_and_the_share() -> None:
    reqs = build_dataset(_cfg(), TOK, 10)
    facts = workload_facts(reqs * 3, seed=42, chat=False)
    assert facts.seed == 42 and facts.requests == 30 and facts.distinct_prompts == 10
    assert facts.implied_prefix_hit_rate is not None
    assert facts.implied_prefix_hit_rate > 0.6  # each prompt sent three times
    assert facts.mean_prompt_tokens is not None and math.isclose(facts.mean_prompt_tokens, 256)
