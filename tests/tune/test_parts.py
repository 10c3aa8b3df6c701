"""The tuner's parts on their own: SLO syntax, the rate search, the space."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servetune.errors import ConfigError
from servetune.metrics.slo_spec import parse_slo, parse_slos
from servetune.results.tune_file import DEFAULT, Probe
from servetune.tune.search import find_slo_max, step_down
from servetune.tune.space import build_space, neighbours, parse_baseline, place_baseline


def test_slo_syntax() -> None:
    s = parse_slo("ttft:p99<=500")
    assert (s.metric, s.stat, s.limit_ms) == ("ttft", "p99", 500.0)
    assert parse_slo("tpot:50").stat == "p99"
    assert parse_slo("e2el:p90<8000").stat == "p90"
    assert parse_slo("itl:median<=20").stat == "p50"
    assert [x.metric for x in parse_slos(["ttft:500,tpot:p50<=20"])] == ["ttft", "tpot"]
    for bad in ("latency:p99<=5", "ttft:p42<=5", "ttft:p99<=-1", "ttft"):
        with pytest.raises(ConfigError):
            parse_slo(bad)


def _threshold(limit: float, capacity: float = 1e9) -> tuple[list[float], object]:
    seen: list[float] = []

    def measure(rate: float) -> Probe:
        seen.append(rate)
        return Probe(
            rate=rate,
            meets=rate <= min(limit, capacity),
            throughput=min(rate, capacity),
            limiting="P99 TTFT",
        )

    return seen, measure


@pytest.mark.parametrize("start", [0.5, 7.0, 40.0])
def test_search_brackets_then_bisects(start: float) -> None:
    seen, measure = _threshold(7.3)
    out = find_slo_max(measure, start, tol=0.05, max_probes=12)  # type: ignore[arg-type]
    assert out.slo_max is not None and out.upper is not None
    assert out.slo_max <= 7.3 < out.upper <= out.slo_max * 1.05 + 1e-9
    assert len(seen) <= 12


def test_search_uses_saturation_and_prunes_below_the_best() -> None:
    seen, measure = _threshold(9.0, capacity=5.0)
    out = find_slo_max(measure, 4.0, beat=6.0)  # type: ignore[arg-type]
    assert out.pruned and out.slo_max is not None and out.slo_max < 6.0
    assert len(seen) <= 4  # the miss below the best measured twice before giving up
    assert seen[-1] == seen[-2]


def test_one_stall_below_the_best_does_not_prune() -> None:
    """A configuration whose first probe at the best-so-far rate hit a stall of the machine
    is measured again there; when that meets, the search goes on upward."""
    seen: list[float] = []

    def measure(rate: float) -> Probe:
        seen.append(rate)
        stall = len(seen) == 1
        return Probe(rate=rate, meets=rate <= 9.0 and not stall, throughput=rate)

    out = find_slo_max(measure, 4.0, beat=4.0, max_probes=10)  # type: ignore[arg-type]
    assert not out.pruned and seen[:2] == [4.0, 4.0]
    assert out.slo_max is not None and out.slo_max > 6.0


def _draw(
    ratios: dict[float, float], seen: list[tuple[str, float]], name: str
) -> Callable[[float], Probe]:
    """One draw of a longer check: at each rate its worst SLO / limit (RATIOS, rounded keys),
    meeting when ≤ 1."""

    def measure(rate: float) -> Probe:
        seen.append((name, round(rate, 3)))
        ratio = ratios[round(rate, 3)]
        return Probe(rate=rate, meets=ratio <= 1.0, throughput=rate, worst_ratio=ratio)

    return measure


def test_a_draw_that_meets_within_the_noise_is_drawn_again() -> None:
    """At 10 req/s the first draw meets by 1% (under the 5% noise) and the second misses: the
    rate does not hold; at 9.524 the first meets by 20%: one draw holds it."""
    seen: list[tuple[str, float]] = []
    one = _draw({10.0: 0.99, 9.524: 0.8}, seen, "one")
    two = _draw({10.0: 1.03, 9.524: 0.82}, seen, "two")
    out = step_down(one, 10.0, tol=0.05, again=two, noise=0.05)
    assert seen == [("one", 10.0), ("two", 10.0), ("one", 9.524)]
    assert out.slo_max == pytest.approx(9.524, rel=1e-3) and out.draws == 1
    assert out.upper == 10.0 and len(out.probes) == 3
    # both draws meet: held on two
    seen.clear()
    two = _draw({10.0: 0.97}, seen, "two")
    out = step_down(one, 10.0, tol=0.05, again=two, noise=0.05)
    assert out.slo_max == 10.0 and out.draws == 2 and len(seen) == 2
    # a margin beyond the noise, or no second draw: one
    seen.clear()
    out = step_down(one, 10.0, tol=0.05, again=two, noise=0.005)
    assert out.slo_max == 10.0 and out.draws == 1 and seen == [("one", 10.0)]


def test_no_rate_meets() -> None:
    _, measure = _threshold(0.0)
    out = find_slo_max(measure, 2.0, floor=0.1)  # type: ignore[arg-type]
    assert out.slo_max is None and out.limiting == "P99 TTFT"


def test_space_from_the_registry() -> None:
    sp = build_space("sim")
    names = [d.name for d in sp.dims]
    assert "max_num_seqs" in names and "tensor_parallel_size" not in names
    assert all(d.values[0] == DEFAULT for d in sp.dims)
    assert 1024 in sp.dim("max_num_seqs").values
    four = build_space("vllm", gpus=4)
    assert set(four.dim("tensor_parallel_size").values) == {DEFAULT, 1, 2, 4}
    small = build_space(
        "vllm", ["max_num_seqs=16,64", "max_num_batched_tokens"], ["gpu_memory_utilization=0.85"]
    )
    assert [d.name for d in small.dims] == ["max_num_seqs", "max_num_batched_tokens"]
    assert small.dim("max_num_seqs").values == [DEFAULT, 16, 64]
    assert small.config({"max_num_seqs": 64, "max_num_batched_tokens": DEFAULT}) == {
        "gpu_memory_utilization": 0.85,
        "max_num_seqs": 64,
    }
    assert neighbours(small, {"max_num_seqs": 16}, "max_num_seqs") == [64]


def test_speculative_decoding_is_searched_for_a_model_with_a_drafter() -> None:
    assert "speculative_method" not in [d.name for d in build_space("sim").dims]
    sp = build_space("sim", speculative=True)
    assert sp.dim("speculative_method").values == [DEFAULT, "mtp"]
    assert sp.dim("num_speculative_tokens").values == [DEFAULT, 1, 2, 3]
    asked = build_space("vllm", ["num_speculative_tokens=1,2"])
    assert [d.name for d in asked.dims] == ["num_speculative_tokens"]


def test_a_knob_the_engine_lacks_names_the_engine() -> None:
    with pytest.raises(ConfigError) as e:
        build_space("llama.cpp", ["gpu_memory_utilization=0.8,0.9"])
    assert "llama.cpp" in e.value.message
    with pytest.raises(ConfigError):
        build_space("sim", ["max_num_seqs=8"], ["max_num_seqs=16"])
    with pytest.raises(ConfigError):
        build_space("sim", ["max_num_seqs=lots"])


def test_baseline_as_items_or_a_command_line() -> None:
    assert parse_baseline("vllm", "max_num_seqs=1 max-num-batched-tokens=512") == {
        "max_num_seqs": 1,
        "max_num_batched_tokens": 512,
    }
    assert parse_baseline("vllm", "max_num_seqs=default") == {}
    line = "vllm serve org/m --max-num-seqs 4 --port 8000 --api-key k --max-model-len 4096"
    assert parse_baseline("vllm-cpu", line) == {"max_num_seqs": 4, "max_model_len": 4096}
    assert parse_baseline("sim", line)["max_num_seqs"] == 4  # the sim models vLLM
    assert parse_baseline("sim", "--max-num-seqs 4 --gpu-memory-utilization 0.85") == {
        "max_num_seqs": 4,
        "gpu_memory_utilization": 0.85,
    }
    assert parse_baseline("vllm", "vllm serve org/m") == {}  # the engine's default, spelled out
    for engine, bad, said in [
        ("vllm", "max_num_seq=1", "unknown knob"),
        ("vllm", "max_num_seqs=lots", "max_num_seqs"),
        ("vllm", "python -m sglang.launch_server --max-running-requests 4", "sglang"),
        ("llama.cpp", "gpu_memory_utilization=0.9", "llama.cpp"),
        ("vllm", "vllm serve 'm", "No closing quotation"),
        ("vllm", "  ", "empty"),
    ]:
        with pytest.raises(ConfigError) as e:
            parse_baseline(engine, bad)
        assert said in e.value.message, (bad, e.value.message)


def test_baseline_is_a_point_of_the_space() -> None:
    sp = build_space("vllm", ["max_num_seqs=4,8", "max_num_batched_tokens=512,1024"])
    placed, params = place_baseline(
        sp, {"max_num_seqs": 1, "max_num_batched_tokens": 1024, "max_model_len": 2048}
    )
    # its searched values join their dimensions (in order), the rest is kept for everyone
    assert placed.dim("max_num_seqs").values == [DEFAULT, 1, 4, 8]
    assert placed.dim("max_num_batched_tokens").values == [DEFAULT, 512, 1024]
    assert params == {"max_num_seqs": 1, "max_num_batched_tokens": 1024}
    assert placed.fixed == {"max_model_len": 2048}
    assert placed.config(params) == {
        "max_model_len": 2048,
        "max_num_seqs": 1,
        "max_num_batched_tokens": 1024,
    }
    assert sp.dim("max_num_seqs").values == [DEFAULT, 4, 8]  # the given space is untouched
    _, partial = place_baseline(sp, {"max_num_seqs": 8})
    assert partial == {"max_num_seqs": 8, "max_num_batched_tokens": DEFAULT}
    fixed = build_space("vllm", ["max_num_seqs=4,8"], ["max_model_len=2048"])
    assert place_baseline(fixed, {"max_model_len": 2048})[0].fixed == {"max_model_len": 2048}
    with pytest.raises(ConfigError) as e:
        place_baseline(fixed, {"max_model_len": 4096})
    assert "but fix sets max_model_len=2048" in e.value.message  # the library's parameter
    message, _ = e.value.shown(lambda f: "--" + f)
    assert "--baseline sets max_model_len=4096 but --fix sets" in message  # the CLI's flags
