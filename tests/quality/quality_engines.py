"""Real engines for the quality tests: llama.cpp serving the quality model at F16 and
quantized by llama.cpp's own llama-quantize (Q8_0, Q4_K_M), vLLM's CPU build serving it in
float32 and bfloat16. Imported by name by the test modules."""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from servetune.engines import (
    EngineKnobs,
    EngineOptions,
    EngineProcess,
    build_command,
    free_port,
    provisioned,
    running,
)

LLAMA_READY_S = 60.0
VLLM_READY_S = 420.0


def quantized(model: provisioned.TinyModel, exe: Path, qtype: str) -> Path:
    """The quality GGUF quantized to QTYPE by llama-quantize, made once and kept beside it."""
    out_dir = model.quality_gguf.parent / "quantized"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"quality-{qtype}.gguf"
    with (out_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            tmp = out.with_suffix(".partial")
            done = subprocess.run(
                [str(exe), str(model.quality_gguf), str(tmp), qtype],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                raise RuntimeError(f"llama-quantize {qtype} failed: {done.stderr[-800:]}")
            tmp.rename(out)
    return out


@contextlib.contextmanager
def llama(exe: Path, gguf: Path, log_dir: Path) -> Iterator[EngineProcess]:
    spec = build_command(
        "llama.cpp",
        gguf,
        EngineKnobs(max_num_seqs=4, max_model_len=1024),
        EngineOptions(executable=str(exe)),
        port=free_port(),
        served_model_name="quality",
    )
    with running(spec, log_dir / f"llama-{gguf.stem}-{spec.port}.log", LLAMA_READY_S) as eng:
        yield eng


@contextlib.contextmanager
def vllm(
    python: Path, model: provisioned.TinyModel, dtype: str, log_dir: Path
) -> Iterator[EngineProcess]:
    spec = build_command(
        "vllm-cpu",
        model.quality_hf_dir,
        EngineKnobs(max_model_len=1024, max_num_seqs=8),
        EngineOptions(executable=str(python), enforce_eager=True, threads=1, dtype=dtype),
        port=free_port(),
        served_model_name="quality",
    )
    with running(spec, log_dir / f"vllm-{dtype}-{spec.port}.log", VLLM_READY_S) as eng:
        yield eng


def base_url(eng: EngineProcess) -> str:
    return f"{eng.spec.origin}/v1"


def golden_samples(path: Path, outputs: list[tuple[str, str]]) -> Path:
    """Business samples from the baseline's own answers (what a team would record from fp16):
    each answer's first word must appear again, plus one JSON check (which this model fails
    everywhere: not a regression). Exact whole answers are left out: greedy decoding of a
    model with close runners-up changes them under any quantization (Q8_0 here changes a third
    of 12-token answers) — a team that wants them sets ``--max-sample-regressions``."""
    lines: list[dict[str, object]] = []
    for i, (prompt, out) in enumerate(outputs):
        word = (out.split() or [out])[0]
        lines.append(
            {
                "name": f"first-word-{i}",
                "prompt": prompt,
                "expected": word,
                "check": "contains",
                "max_tokens": 12,
            }
        )
    lines.append({"name": "json", "prompt": "Reply in JSON:", "check": "json", "max_tokens": 8})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
