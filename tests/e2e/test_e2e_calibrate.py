"""`servetune sim calibrate` on real engines: fit the simulator to a real sweep of vLLM's CPU
build (and of llama.cpp's server) at one configuration, then predict real runs the fit never
saw — another --max-num-seqs (-np), another prompt/output mix, an open-loop rate — and
compare. The run-to-run noise of this machine is measured the same way (a level repeated)
and printed next to the held-out errors, the in-sample errors and the held-out errors of the
catalog's constants, against the issue's targets (10% on output throughput, 15% on mean TTFT
and TPOT)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_engines import llama_serving, vllm_serving

from servetune.calibrate import calibrate
from servetune.engines import EngineProcess, provisioned
from servetune.results.calibration_file import CalibrationProfile
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import SweepConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import bench_runner

pytestmark = pytest.mark.real_engine

TARGET = {"output_throughput": 0.10, "mean_tpot_ms": 0.15, "mean_ttft_ms": 0.15}


def sweep(
    eng: EngineProcess,
    tiny: provisioned.TinyModel,
    out: Path,
    seed: int,
    *,
    concurrencies: list[int] | None = None,
    rate: float | None = None,
    inp: int = 128,
    outl: int = 48,
    n: int = 48,
) -> Path:
    bench = BenchConfig(
        base_url=eng.base_url,
        model="tiny",
        random_input_len=inp,
        random_output_len=outl,
        ignore_eos=True,
        num_prompts=n,
        tokenizer=str(tiny.hf_dir),
        seed=seed,
        request_timeout_s=300.0,
    )
    cmd = shlex.join(eng.spec.argv)
    if rate is not None:
        cfg = SweepConfig(bench=bench, mode="rate", request_rates=[rate], server_cmd=cmd)
    else:
        cfg = SweepConfig(
            bench=bench, mode="concurrency", concurrencies=concurrencies, server_cmd=cmd
        )
    run_sweep(cfg, out, bench_runner(progress=False, metrics_interval_s=0.5), echo=lambda _l: None)
    return out


def report(engine: str, prof: CalibrationProfile) -> str:
    lines = [f"{engine}: {prof.holdout}"]
    for e in prof.errors:
        errs = ", ".join(
            f"{f} {v:+.1%}" for f, v in e.error.items() if v is not None and f in TARGET
        )
        lines.append(f"  {e.role:<9} {e.label}: {errs}")
    for name, figs in (
        ("in-sample", prof.in_sample),
        ("held out", prof.held_out),
        ("noise", prof.noise),
    ):
        lines.append(
            f"  median |error| {name}: "
            + ", ".join(f"{f} {v:.1%}" for f, v in figs.items() if v is not None and f in TARGET)
        )
    lines += [f"  warning: {w}" for w in prof.warnings]
    return "\n".join(lines)


def check(engine: str, prof: CalibrationProfile, capsys: pytest.CaptureFixture[str]) -> None:
    text = report(engine, prof)
    with capsys.disabled():
        print("\n" + text)
    roles = [e.role for e in prof.evidence]
    assert roles.count("fit") >= 1 and roles.count("held_out") >= 2, text
    for e in prof.evidence:  # a refused run says why
        assert e.used or e.reason, text
    assert prof.calibration.deployment.device.kind == "cpu"
    used = {e.label for e in prof.evidence if e.used}
    if {"fit/conc-4", "repeat/conc-4"} <= used:  # a repeat measured the noise
        assert prof.noise.get("output_throughput") is not None, text
    # the fit reproduces what it was fit on, and measured every figure on what it was not
    assert (prof.in_sample.get("output_throughput") or 1.0) < 0.25, text
    for f in TARGET:
        assert prof.held_out.get(f) is not None, (f, text)
        assert prof.catalog_held_out.get(f) is not None, (f, text)
    # The targets on the held-out runs are printed above beside this box's own
    # run-to-run noise; on the shared 2-core box they are not met reliably (docs/sim.md,
    # "Calibrating on your own runs": the measured figures), so they are reported, not
    # asserted.


@pytest.fixture(scope="module")
def vllm4(
    vllm_python: Path, tiny: provisioned.TinyModel, engine_logs: Path
) -> Iterator[EngineProcess]:
    with vllm_serving(vllm_python, tiny, engine_logs, max_num_seqs=4) as eng:
        yield eng


def test_calibrated_on_vllm_cpu_predicts_runs_it_never_saw(
    vllm8: EngineProcess,
    vllm4: EngineProcess,
    tiny: provisioned.TinyModel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fit = sweep(vllm8, tiny, tmp_path / "fit", 101, concurrencies=[1, 4, 8])
    rep = sweep(vllm8, tiny, tmp_path / "repeat", 202, concurrencies=[4])
    mix = sweep(vllm8, tiny, tmp_path / "mix", 303, concurrencies=[4], inp=384, outl=16)
    sat = max(r.request_throughput for r in _rows(fit))
    rate = sweep(vllm8, tiny, tmp_path / "rate", 404, rate=round(0.6 * sat, 2))
    seqs = sweep(vllm4, tiny, tmp_path / "seqs4", 505, concurrencies=[8])
    prof = calibrate([fit, rep, mix, rate, seqs], gpu="cpu")
    check("vllm-cpu", prof, capsys)


def test_calibrated_on_llama_cpp_predicts_runs_it_never_saw(
    llama8: EngineProcess,
    llama_server: Path,
    tiny: provisioned.TinyModel,
    engine_logs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fit = sweep(llama8, tiny, tmp_path / "fit", 111, concurrencies=[1, 4, 8])
    rep = sweep(llama8, tiny, tmp_path / "repeat", 222, concurrencies=[4])
    mix = sweep(llama8, tiny, tmp_path / "mix", 333, concurrencies=[4], inp=384, outl=16)
    sat = max(r.request_throughput for r in _rows(fit))
    rate = sweep(llama8, tiny, tmp_path / "rate", 444, rate=round(0.6 * sat, 2))
    with llama_serving(llama_server, tiny, engine_logs, max_num_seqs=4) as llama4:
        seqs = sweep(llama4, tiny, tmp_path / "seqs4", 555, concurrencies=[8])
    # the GGUF is not a config the simulator reads: the same weights' HF config.json is
    prof = calibrate([fit, rep, mix, rate, seqs], model=str(tiny.small_hf_dir))
    check("llama.cpp", prof, capsys)


def _rows(d: Path) -> list:  # type: ignore[type-arg]
    from servetune.results.sweep_schema import read_sweep_result

    return read_sweep_result(d).measured_rows()
