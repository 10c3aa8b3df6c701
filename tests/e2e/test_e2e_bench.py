"""`bench` against real engines: the client's figures agree with the engine's own.

vLLM keeps histograms of what it measured for each request: TTFT from the request's arrival
at the API server to its first token, E2E from arrival to finish, and time per output token
over the decode phase. Their exact means are `_sum / _count` deltas over the run. The client
measures from when the request left it to when chunks arrived, so it sees the same intervals
plus loopback HTTP and SSE framing: it may only be LATER than the engine, by a little.

Stated tolerance (loopback, 2 shared cores, Python client and engine on the same box):
    engine_mean − 2 ms  ≤  client_mean                                      (TTFT, E2E)
    client_median  ≤  engine_mean × 1.15 + 25 ms                           (TTFT, E2E)
    |client_mean − engine_mean| ≤ 15% of engine_mean + 2 ms                 (TPOT)
the lower bounds on every run, the others on the best of up to three (vLLM's test below).
Token counts must match exactly: the client takes them from `usage`, never from chunks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_engines import scrape, series, unexpected_failures

from servetune.engines import EngineProcess, provisioned
from servetune.loadgen.bench import bench
from servetune.results.io import read_records
from servetune.results.schema import BenchConfig, RunResult

pytestmark = pytest.mark.real_engine

N = 24
OUT = 32


def run(eng: EngineProcess, tiny: provisioned.TinyModel, out: Path, **cfg: object) -> RunResult:
    base = {
        "base_url": eng.base_url,
        "model": "tiny",
        "dataset_name": "random",
        "random_input_len": 64,
        "random_output_len": OUT,
        "ignore_eos": True,  # the token counts below are the planned lengths
        "num_prompts": N,
        "request_rate": 3.0,
        "tokenizer": str(tiny.hf_dir),
        "seed": 7,
        "request_timeout_s": 120.0,
    }
    return bench(BenchConfig(**{**base, **cfg}), out, progress=False)


def hist_mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float:
    d_sum = series(after, f"{name}_sum") - series(before, f"{name}_sum")
    d_count = series(after, f"{name}_count") - series(before, f"{name}_count")
    assert d_count == N, f"{name}: the engine counted {d_count} requests, the client sent {N}"
    return 1000 * d_sum / d_count


def test_vllm_client_agrees_with_engine_histograms(
    vllm8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    """Load only makes the client later than the engine's histograms (a starved API server
    sends late; seen at load 11: client TTFT mean 192 / median 146 vs vLLM's 63 ms, E2E 504 vs
    495 ms, so TPOT 10.1 vs 14.0 ms). The lower bounds hold on every run; the upper ones
    (TTFT and E2E by the client's median, as tests/sim/test_bench_against_server.py: a few
    stalled requests move the mean, a client stamping late moves the median) and TPOT are
    judged by the best of up to three runs, each with fresh prompts."""
    reports = []
    for seed in (7, 8, 9):
        out = tmp_path / f"run-{seed}"
        before = scrape(vllm8)
        result = run(vllm8, tiny, out, seed=seed)
        after = scrape(vllm8)
        s = result.summary
        assert (s.completed, s.failed) == (N, 0), s.errors

        records = read_records(out)
        assert all(r.output_tokens == OUT and r.tokens_source == "usage" for r in records)
        gen = series(after, "vllm:generation_tokens_total") - series(
            before, "vllm:generation_tokens_total"
        )
        prompt = series(after, "vllm:prompt_tokens_total") - series(
            before, "vllm:prompt_tokens_total"
        )
        assert gen == s.total_output_tokens == N * OUT
        assert prompt == s.total_input_tokens == sum(r.prompt_tokens or 0 for r in records)
        # A local tokenizer that is the server's own: the planned lengths are exact.
        assert all(r.prompt_tokens == r.planned_input_len for r in records)

        ttft = hist_mean_ms(before, after, "vllm:time_to_first_token_seconds")
        e2e = hist_mean_ms(before, after, "vllm:e2e_request_latency_seconds")
        tpot = hist_mean_ms(before, after, "vllm:request_time_per_output_token_seconds")
        assert s.ttft.mean is not None and s.e2el.mean is not None and s.tpot.mean is not None
        assert s.ttft.p50 is not None and s.e2el.p50 is not None
        report = (
            f"client vs vLLM means: TTFT {s.ttft.mean:.1f} vs {ttft:.1f} ms, "
            f"E2E {s.e2el.mean:.1f} vs {e2e:.1f} ms, TPOT {s.tpot.mean:.2f} vs {tpot:.2f} ms "
            f"(client medians: TTFT {s.ttft.p50:.1f}, E2E {s.e2el.p50:.1f} ms)"
        )
        print(report)
        reports.append(report)
        assert ttft - 2 <= s.ttft.mean, report
        assert e2e - 2 <= s.e2el.mean, report
        if (
            s.ttft.p50 <= ttft * 1.15 + 25
            and s.e2el.p50 <= e2e * 1.15 + 25
            and abs(s.tpot.mean - tpot) <= 0.15 * tpot + 2
        ):
            break
    else:
        pytest.fail("the client above the engine in every run: " + " | ".join(reports))


def test_llama_cpp_token_counts_match_its_counters(
    llama8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    before = scrape(llama8)
    result = run(llama8, tiny, tmp_path / "run", request_rate=4.0)
    after = scrape(llama8)
    s = result.summary
    assert not unexpected_failures(tmp_path / "run", "llama.cpp")
    assert s.completed >= N - 2
    records = [r for r in read_records(tmp_path / "run") if r.ok]
    # llama-server puts usage on the last content chunk, not in a chunk of its own.
    assert all(r.output_tokens == OUT and r.tokens_source == "usage" for r in records)
    predicted = series(after, "llamacpp:tokens_predicted_total") - series(
        before, "llamacpp:tokens_predicted_total"
    )
    assert predicted == s.total_output_tokens == s.completed * OUT
    prompt = series(after, "llamacpp:prompt_tokens_total") - series(
        before, "llamacpp:prompt_tokens_total"
    )
    assert prompt == s.total_input_tokens
    assert s.ttft.mean is not None and s.ttft.mean > 0
