"""Read a vLLM command line: ``vllm serve MODEL --max-num-seqs …`` or
``python -m vllm.entrypoints.openai.api_server --model MODEL …``.

Only the flags that shape memory and scheduling are read (vLLM's spellings, ``_`` or ``-``,
``--flag value`` or ``--flag=value``); everything else is listed as ignored, never an error —
a real command line carries ports, API keys and logging flags that do not matter here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from servetune.errors import ConfigError

_VALUE_FLAGS: dict[str, tuple[str, type]] = {
    "--model": ("model", str),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--max-model-len": ("max_model_len", int),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--block-size": ("block_size", int),
    "--served-model-name": ("served_model_name", str),
    "--long-prefill-token-threshold": ("long_prefill_token_threshold", int),
}
_BOOL_FLAGS: dict[str, str] = {
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enable-prefix-caching": "enable_prefix_caching",
}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_SUPPORTED_QUANT = {"fp8", "awq", "gptq", "awq_marlin", "gptq_marlin"}
_KV_ALIASES = {"bfloat16": "auto", "float16": "auto", "half": "auto", "bf16": "auto"}


@dataclass
class VllmCommand:
    """The knobs read from a command line (EngineConfig field names) and what was ignored."""

    fields: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    """Values the memory planner does not model (said, not silently dropped)."""
    entry: str = ""


def _norm_flag(tok: str) -> tuple[str, str | None]:
    name, eq, value = tok.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None)


def _convert(flag: str, raw: str, kind: type) -> Any:
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(
            f"{flag} {raw!r}: expected {'an integer' if kind is int else 'a number'}",
            hint=f"fix {flag} in the command line",
        ) from None


def parse_vllm_command(line: str | list[str]) -> VllmCommand:
    """The engine knobs of a ``vllm serve`` / ``api_server`` command line."""
    tokens = shlex.split(line.replace("\\\n", " ")) if isinstance(line, str) else list(line)
    # Leading environment assignments (CUDA_VISIBLE_DEVICES=0 vllm serve …).
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens.pop(0)
    cmd = VllmCommand()
    rest: list[str]
    if len(tokens) >= 2 and tokens[0].endswith("vllm") and tokens[1] == "serve":
        cmd.entry = "vllm serve"
        rest = tokens[2:]
        if rest and not rest[0].startswith("-"):
            cmd.fields["model"] = rest.pop(0)
    elif "-m" in tokens and any("vllm.entrypoints" in t for t in tokens):
        i = tokens.index("-m")
        cmd.entry = f"python -m {tokens[i + 1]}" if i + 1 < len(tokens) else "python -m"
        rest = tokens[i + 2 :]
    elif tokens and tokens[0].startswith("-"):
        cmd.entry = "engine args"
        rest = tokens
    else:
        raise ConfigError(
            f"not a vLLM command line: {' '.join(tokens[:3])} …",
            hint='give "vllm serve MODEL --flag …", "python -m vllm.entrypoints.openai.'
            'api_server --model MODEL …", or just the flags',
        )
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("-"):
            cmd.ignored.append(tok)
            i += 1
            continue
        name, inline = _norm_flag(tok)
        if name in _BOOL_FLAGS or (name.startswith("--no-") and "--" + name[5:] in _BOOL_FLAGS):
            negated = name.startswith("--no-")
            target = _BOOL_FLAGS["--" + name[5:] if negated else name]
            value = not negated
            raw = inline
            if raw is None and i + 1 < len(rest) and rest[i + 1].lower() in _TRUE | _FALSE:
                raw = rest[i + 1]
                i += 1
            if raw is not None:
                value = raw.lower() in _TRUE
                if negated:
                    value = not value
            cmd.fields[target] = value
            i += 1
            continue
        if name in _VALUE_FLAGS:
            target, kind = _VALUE_FLAGS[name]
            if inline is None:
                if i + 1 >= len(rest):
                    raise ConfigError(f"{name} needs a value", hint=f"e.g. {name} 256")
                inline = rest[i + 1]
                i += 1
            cmd.fields[target] = _convert(name, inline, kind)
            i += 1
            continue
        # An unknown flag: skip its value too when one follows.
        cmd.ignored.append(tok)
        if inline is None and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            cmd.ignored[-1] += f" {rest[i + 1]}"
            i += 1
        i += 1
    q = cmd.fields.get("quantization")
    if q is not None:
        q = str(q).lower()
        if q in _SUPPORTED_QUANT:
            cmd.fields["quantization"] = q
        else:
            cmd.unsupported.append(
                f"--quantization {q}: the memory planner models fp8, awq and gptq only; "
                "planned as bf16 weights (the pool is underestimated)"
            )
            del cmd.fields["quantization"]
    kv = cmd.fields.get("kv_cache_dtype")
    if kv is not None:
        kv = _KV_ALIASES.get(str(kv).lower(), str(kv).lower())
        if kv in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"):
            cmd.fields["kv_cache_dtype"] = kv
        else:
            cmd.unsupported.append(f"--kv-cache-dtype {kv}: not modelled; planned as auto")
            del cmd.fields["kv_cache_dtype"]
    return cmd
