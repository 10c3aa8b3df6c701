"""TensorRT-LLM through its profile alone: the launcher line read back by a parser written from
``trtllm-serve``'s documented options (the engine does not install here: it needs CUDA), its
YAML side file, its command line read into knobs, its start failures.

The parser below follows the reference of ``trtllm-serve`` (TensorRT-LLM docs,
``commands/trtllm-serve``; ``tensorrt_llm/commands/serve.py``): a click command, so options
are taken only as declared (``--max_batch_size``, never ``--max-batch-size``) and an
undeclared one is an error ("No such option"); the model is the one positional argument.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from servetune.engines import EngineKnobs, EngineOptions, build_command
from servetune.engines.failures import recognise
from servetune.errors import ConfigError
from servetune.knobs import engine_knobs, knob, parse_command, render_command
from servetune.profiles import failure_patterns, profile


def trtllm_serve_parser() -> argparse.ArgumentParser:
    """trtllm-serve's documented options (those a launch may carry), exactly as spelled."""
    p = argparse.ArgumentParser(prog="trtllm-serve", allow_abbrev=False, exit_on_error=False)
    p.add_argument("model")
    p.add_argument("--tokenizer")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["pytorch", "tensorrt", "trt", "_autodeploy"])
    p.add_argument("--log_level")
    p.add_argument("--max_beam_width", type=int)
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--max_num_tokens", type=int)
    p.add_argument("--max_seq_len", type=int)
    p.add_argument("--tensor_parallel_size", "--tp_size", dest="tp_size", type=int)
    p.add_argument("--pipeline_parallel_size", "--pp_size", dest="pp_size", type=int)
    p.add_argument("--moe_expert_parallel_size", "--ep_size", dest="ep_size", type=int)
    p.add_argument(
        "--free_gpu_memory_fraction",
        "--kv_cache_free_gpu_memory_fraction",
        dest="kv_fraction",
        type=float,
    )
    p.add_argument("--trust_remote_code", action="store_true")
    p.add_argument("--config", "--extra_llm_api_options", dest="extra_llm_api_options")
    p.add_argument("--enable_chunked_prefill", action="store_true")
    return p


KNOBS = EngineKnobs(
    max_num_seqs=64,
    max_num_batched_tokens=8192,
    max_model_len=4096,
    gpu_memory_utilization=0.85,
    tensor_parallel_size=2,
    pipeline_parallel_size=1,
    enable_chunked_prefill=True,
    enable_prefix_caching=False,
    kv_cache_dtype="fp8",
)


def test_the_launcher_line_is_what_trtllm_serve_reads() -> None:
    spec = build_command("trtllm", "Qwen/Qwen3-8B", KNOBS, port=8123)
    assert spec.argv[0] == "trtllm-serve"
    args = trtllm_serve_parser().parse_args(spec.argv[1:])
    assert args.model == "Qwen/Qwen3-8B"
    assert (args.host, args.port) == ("127.0.0.1", 8123)
    assert (args.max_batch_size, args.max_num_tokens, args.max_seq_len) == (64, 8192, 4096)
    assert (args.tp_size, args.pp_size, args.kv_fraction) == (2, 1, 0.85)
    assert args.enable_chunked_prefill is True
    # served under the model argument (trtllm-serve has no name flag): readiness asks for it
    assert spec.served_model_name == "Qwen/Qwen3-8B"
    # the options that live in the YAML side file, and the two its metrics need
    assert args.extra_llm_api_options in spec.files
    side = yaml.safe_load(spec.files[args.extra_llm_api_options])
    assert side == {
        "return_perf_metrics": True,
        "enable_iter_perf_stats": True,
        "kv_cache_config": {"enable_block_reuse": False, "dtype": "fp8"},
    }


def test_every_flag_of_every_knob_is_one_trtllm_serve_declares() -> None:
    """Each knob alone renders to a line the documented parser takes (no dashed spelling, no
    flag it lacks)."""
    parser = trtllm_serve_parser()
    samples = {"gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8"}
    for name in engine_knobs("trtllm"):
        value = True if knob(name).type == "bool" else samples.get(name, 2)
        spec = build_command("trtllm", "m", EngineKnobs(**{name: value}), port=1)
        parser.parse_args(spec.argv[1:])  # raises on an undeclared option


def test_a_dashed_flag_is_refused_by_the_documented_parser() -> None:
    """The parser can fail: the spelling vLLM would take is not trtllm-serve's."""
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        trtllm_serve_parser().parse_args(["m", "--max-batch-size", "4"])


def test_a_knob_trtllm_serve_lacks_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        build_command("trtllm", "m", EngineKnobs(max_num_partial_prefills=2), port=1)
    assert err.value.code == "knob.absent" and "trtllm" in err.value.message


def test_the_side_file_is_written_at_start_and_removed_when_done(tmp_path: Path) -> None:
    from servetune.engines import start
    from servetune.errors import EngineError

    spec = build_command("trtllm", "m", KNOBS, port=8124)
    spec.write_files()
    for path, text in spec.files.items():
        assert Path(path).read_text() == text
    spec.remove_files()
    assert not any(Path(p).exists() for p in spec.files)
    missing = build_command(
        "trtllm", "m", KNOBS, EngineOptions(executable=str(tmp_path / "nope")), port=8125
    )
    with pytest.raises(EngineError, match="not found"):
        start(missing, tmp_path / "engine.log")
    assert not any(Path(p).exists() for p in missing.files)  # a failed start leaves none


def test_its_command_line_is_read_back_with_the_side_file(tmp_path: Path) -> None:
    side = tmp_path / "opts.yaml"
    side.write_text(
        "kv_cache_config:\n  enable_block_reuse: true\n  dtype: fp8\nenable_iter_perf_stats: true\n"
    )
    parsed = parse_command(
        f"trtllm-serve /models/qwen --backend pytorch --max_batch_size 128 --max_num_tokens 4096 "
        f"--tp_size 4 --kv_cache_free_gpu_memory_fraction 0.9 --extra_llm_api_options {side}"
    )
    assert parsed.engine == "trtllm" and parsed.model == "/models/qwen"
    assert parsed.values == {
        "max_num_seqs": 128,
        "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": True,
        "kv_cache_dtype": "fp8",
        "tensor_parallel_size": 4,
    }
    assert "--backend pytorch" in parsed.ignored
    missing = parse_command("trtllm-serve m --extra_llm_api_options /nowhere.yaml")
    assert any("not read" in n for n in missing.notes)


def test_render_command_shows_the_side_file() -> None:
    cmd = render_command("trtllm", "m", {"enable_prefix_caching": False})
    text = cmd.shell()
    assert text.startswith("cat > llm_api_options.yaml <<'EOF'\n")
    assert "enable_block_reuse: false" in text
    assert text.endswith("trtllm-serve m --extra_llm_api_options llm_api_options.yaml")


def test_its_profile_says_where_its_metrics_are() -> None:
    p = profile("trtllm")
    assert p.metrics.path == "/prometheus/metrics"
    assert p.metrics.maps[0].prefix == "trtllm_"
    assert profile("tensorrt-llm") is p


def test_its_start_failures_are_recognised() -> None:
    lines = ["[TRT-LLM] [E] Error: No such option: --max-batch-size"]
    found = recognise(lines, failure_patterns("trtllm"))
    assert found is not None and found.kind == "unknown_argument"


def test_engine_cmd_prints_the_side_file_and_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    from servetune.cli import main

    code = main(["engine", "cmd", "trtllm", "--model", "m", "--max-num-seqs", "8", "--port", "9"])
    assert code == 0
    out = capsys.readouterr().out
    assert "enable_iter_perf_stats: true" in out
    assert "trtllm-serve m --host 127.0.0.1 --port 9 --max_batch_size 8" in out


def test_tune_launches_trtllm_serve_per_configuration(tmp_path: Path) -> None:
    """`tune --engine trtllm` goes through the profile to the launcher: here, where
    trtllm-serve is not installed, each trial fails saying so, and the study says no
    configuration could be measured (exit 1) — never a traceback, never a success."""
    from tests.conftest import run_cli

    out = tmp_path / "tune"
    got = run_cli(
        "tune", "--engine", "trtllm", "--model", "Qwen/Qwen3-8B", "--trials", "1",
        "--num-prompts", "4", "--slo", "ttft:p99<=500", "--result-dir", str(out),
        timeout=120,
    )  # fmt: skip
    assert got.returncode == 1, got.stdout + got.stderr
    assert "Traceback" not in got.stderr
    assert "cannot run 'trtllm-serve': not found" in got.stdout
    assert (out / "tune.json").is_file()
