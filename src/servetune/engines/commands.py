"""Command lines for each engine, built from :class:`EngineKnobs` and :class:`EngineOptions`:
the engine's part (entry, listen flags, served name, side file) from its profile
(:mod:`servetune.profiles`), the knobs spelled by the knob registry (:mod:`servetune.knobs`).

A :class:`LaunchSpec` is everything needed to start one engine process: argv, the environment
it adds, and where it will listen. Building one runs nothing, so ``servetune engine cmd``
prints exactly what ``start`` would run.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servetune.engines import provisioned
from servetune.engines.knobs import EngineKnobs
from servetune.errors import ConfigError
from servetune.knobs import Rendered, has, render_args, side_file_text, side_options
from servetune.profiles import EngineProfile, profile


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
    files: dict[str, str] = Field(
        default_factory=dict, description="written before the start: path → text (side files)"
    )
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

    def script(self) -> str:
        """The command as shell text to copy: a here-document writing each side file, then
        :meth:`shell`."""
        heredocs = "".join(
            f"cat > {shlex.quote(path)} <<'EOF'\n{text}EOF\n" for path, text in self.files.items()
        )
        return heredocs + self.shell()

    def remove_files(self) -> None:
        """Remove the side files once the engine is gone (they are the launcher's, per port)."""
        for path in self.files:
            Path(path).unlink(missing_ok=True)

    def write_files(self) -> None:
        """Write the side files the command reads."""
        for path, text in self.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")


def _knob_args(engine: str, knobs: EngineKnobs, opts: EngineOptions) -> Rendered:
    """The registry's flags (environment, side-file options) for the knobs, with the options
    that are knobs of this engine (dtype, enforce-eager, threads) folded in when the knobs
    leave them unset."""
    values = knobs.given()
    for name, value in (
        ("dtype", opts.dtype),
        ("enforce_eager", opts.enforce_eager),
        ("threads", opts.threads),
    ):
        if value is not None and values.get(name) is None and has(engine, name):
            values[name] = value
    return render_args(engine, values)


def _executable(prof: EngineProfile, opts: EngineOptions) -> list[str]:
    """What runs in place of the command's first word: the option, else the engine's own
    default (on PATH, provisioned, or the profile's word)."""
    if opts.executable:
        return [opts.executable]
    launch = prof.launch
    word = prof.entry.command[0]
    if launch.on_path and (on_path := shutil.which(word)):
        return [on_path]
    if launch.provisioned is not None and (found := provisioned.find(launch.provisioned)):
        return [str(found)]
    if launch.executable is not None:
        return [sys.executable if w == "{python}" else w for w in launch.executable]
    return [word]


def _served_name(prof: EngineProfile, model: str, given: str | None) -> str:
    if given:
        return given
    if prof.launch.served_name == "given":
        return model  # served under the name it was given
    if Path(model).exists():
        return Path(model).name  # a local folder or file: its name, not its path
    return model  # a hub name: served under it, as vLLM does by default


def _options(prof: EngineProfile, opts: EngineOptions) -> EngineOptions:
    """OPTS with the engine's own defaults for the ones left unset."""
    unset = {k: v for k, v in prof.launch.option_defaults if getattr(opts, k) is None}
    return opts.model_copy(update=unset) if unset else opts


def _kv_pool(prof: EngineProfile, knobs: EngineKnobs, opts: EngineOptions) -> list[str]:
    launch = prof.launch
    if launch.kv_pool_flag is None:
        return []
    gib = opts.cpu_kv_cache_gib
    if gib is None and knobs.get("gpu_memory_utilization") is None:
        gib = launch.kv_pool_default_gib
    return [] if gib is None else [launch.kv_pool_flag, str(int(gib * 2**30))]


def side_file_path(engine: str, port: int) -> Path:
    """Where the launcher writes ENGINE's YAML side file for a launch on PORT."""
    return Path(tempfile.gettempdir()) / f"servetune-{profile(engine).slug}-{port}.yaml"


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
    prof = profile(engine)
    engine = prof.id
    knobs = knobs or EngineKnobs()
    opts = options or EngineOptions()
    for option, what, hint in prof.launch.required_options:
        if not getattr(opts, option):
            raise ConfigError(f"engine {engine} needs {what}", hint=hint)
    name = _served_name(prof, str(model), served_model_name)
    entry, launch = prof.entry, prof.launch
    argv = [*_executable(prof, opts), *entry.command[1:]]
    for option, flag_name in launch.option_flags:
        argv += [flag_name, str(getattr(opts, option))]
    argv += [entry.model_flag, str(model)] if entry.model_flag else [str(model)]
    argv += [launch.host_flag, host, launch.port_flag, str(port)]
    if launch.name_flag:
        argv += [launch.name_flag, name]
    argv += launch.always
    rendered = _knob_args(engine, knobs, _options(prof, opts))
    files: dict[str, str] = {}
    side = side_options(engine, rendered)
    if side and launch.side_file_flag:
        path = side_file_path(engine, port)
        files[str(path)] = side_file_text(side)
        rendered.args += [launch.side_file_flag, str(path)]
    return LaunchSpec(
        engine=engine,
        argv=[*argv, *rendered.args, *_kv_pool(prof, knobs, opts), *opts.extra_args],
        env={**dict(launch.env), **rendered.env, **opts.env},
        files=files,
        host=host,
        port=port,
        served_model_name=name,
        knobs=knobs,
    )
