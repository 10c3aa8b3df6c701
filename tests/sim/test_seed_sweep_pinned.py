"""The seed's sweep simulates exactly what it simulated when it was pinned.

Speed work on the offline path (``sim/offline_run.py``, ``sim/engine.py``, ``sim/kv.py``,
``sim/hist.py``, the summary code) must not change a simulated figure. This test runs the
seed's sweep (Qwen2.5-7B-Instruct on A100-80GB, 32768 / 0.90 / 256 / 8192, random 1024/128,
rates 8–128, 1000 prompts each: ``benchmarks/sim_speed.py``'s) through ``sim run``'s path and
compares its summaries, server summaries and both JSONL files with the pin in
``data/seed_sweep_pin.json``.

What the simulation *models* (the fitted constants, the step and front-end models, the memory
planner, the catalogs, the workload's draws) changes the figures on purpose: the pin carries a
fingerprint of those files, and when they differ from it *and* the figures changed the test
fails with the command that re-pins (``python tests/sim/test_seed_sweep_pinned.py --write``):
a refit re-pins in its own commit, on purpose (it used to skip, and twice the skip went
unnoticed while other changes slipped through); an edit of a model file that leaves every
figure alone (a new input check) keeps the comparison running and needs no re-pin.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import run_offline

SRC = Path(__file__).resolve().parents[2] / "src" / "servetune"
PIN = Path(__file__).parent / "data" / "seed_sweep_pin.json"
MODEL_FILES = (
    "sim/data/*.json",
    "sim/perf.py",
    "sim/frontend.py",
    "sim/memory.py",
    "sim/catalog.py",
    "sim/config.py",
    "workload/*.py",
)
"""What the simulation models (not how fast it runs): a change here re-pins."""
SEED = EngineConfig(
    gpu="A100-80GB",
    model="Qwen/Qwen2.5-7B-Instruct",
    max_model_len=32768,
    gpu_memory_utilization=0.90,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)
RATES = (8, 16, 32, 64, 128)


def fingerprint() -> str:
    h = hashlib.sha256()
    for pattern in MODEL_FILES:
        for p in sorted(SRC.glob(pattern)):
            h.update(p.relative_to(SRC).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def seed_sweep() -> dict[str, Any]:
    """Per rate: readable figures and digests of everything else the run produced."""
    out: dict[str, Any] = {}
    for rate in RATES:
        cfg = BenchConfig(
            num_prompts=1000, random_input_len=1024, random_output_len=128, request_rate=rate
        )
        with tempfile.TemporaryDirectory() as d:
            res = run_offline(cfg, SEED, Path(d))
            files = {n: _sha((Path(d) / n).read_bytes()) for n in ("requests.jsonl",)}
            files["server_metrics.jsonl"] = _sha((Path(d) / "server_metrics.jsonl").read_bytes())
        s = res.summary
        server = res.server.summary if res.server is not None else {}
        sim = res.target.simulated or {}
        out[str(rate)] = {
            "completed": s.completed,
            "output_throughput": s.output_throughput,
            "ttft_p50": s.ttft.p50,
            "ttft_p99": s.ttft.p99,
            "tpot_mean": s.tpot.mean,
            "itl_p99": s.itl.p99,
            "e2el_p99": s.e2el.p99,
            "virtual_duration_s": sim.get("virtual_duration_s"),
            "steps": sim.get("steps"),
            "preemptions": server.get("sim", {}).get("preemptions_total"),
            "kv_cache_usage_mean": server.get("kv_cache_usage_mean"),
            "summary": _sha(s.model_dump_json().encode()),
            "server_summary": _sha(json.dumps(server, sort_keys=True).encode()),
            **files,
        }
    return out


def test_seed_sweep_simulates_as_pinned() -> None:
    pin = json.loads(PIN.read_text())
    got = seed_sweep()
    changed = {
        rate: {k: (want[k], got[rate][k]) for k in want if want[k] != got[rate][k]}
        for rate, want in pin["rates"].items()
    }
    changed = {rate: figures for rate, figures in changed.items() if figures}
    if changed and pin["fingerprint"] != fingerprint():
        # a model file changed and so did the figures: a refit or a new model. It fails too
        # (a skip went unnoticed twice and left speed work unguarded): re-pin in the same
        # commit, on purpose
        pytest.fail(
            "what the simulation models changed since the seed sweep was pinned (fitted "
            "constants, step/front-end/memory models, catalogs or workload draws) and so did "
            "its figures: re-pin with `.venv/bin/python tests/sim/test_seed_sweep_pinned.py "
            f"--write` after checking that the change of figures is intended: {changed}"
        )
    assert not changed, (
        f"the seed sweep no longer simulates what it did (rate: pinned, now): {changed}. The "
        "code changed a simulated figure; only a change of what the simulation models may do "
        "that (then re-pin, see the module docstring)"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: {sys.argv[0]} --write   (re-pins {PIN})")
    PIN.parent.mkdir(exist_ok=True)
    body = {"fingerprint": fingerprint(), "rates": seed_sweep()}
    PIN.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    print(f"pinned {PIN} (fingerprint {body['fingerprint']})")
