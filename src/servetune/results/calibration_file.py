"""``calibration.json``: the simulator fitted to one deployment's own runs
(``servetune sim calibrate``), small enough for a team to commit.

Two parts: :class:`Calibration` — what the simulator applies (the step-time and host
constants, the KV pool the server showed, the device it was measured on, the ranges the
evidence covered), carried inside an engine configuration so that every run simulated with it
records it — and the rest of :class:`CalibrationProfile`: what it was fit on, the fit's
uncertainty per constant, what the data could not identify, and its error on the evidence it
held out next to the error on what it was fit to.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servetune.results.jsonfile import read_model_file, write_model_file

CALIBRATION_FILE = "calibration.json"
CALIBRATION_SCHEMA_VERSION = 1

FIGURES = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")
"""The figures a calibration's error is measured on, per run (client-side, the window's)."""


class DeviceSpec(BaseModel):
    """The device the constants are relative to (peak FLOP/s and bandwidth as the simulator
    read them): a catalog GPU, or a CPU measured at set-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["gpu", "cpu"] = "gpu"
    peak_tflops: float = Field(gt=0, allow_inf_nan=False)
    memory_gb_s: float = Field(gt=0, allow_inf_nan=False)
    memory_gib: float = Field(gt=0, allow_inf_nan=False)
    cores: int | None = Field(default=None, ge=1)
    threads: int | None = Field(default=None, ge=1)
    """Threads the engine's forward pass ran on (a CPU engine: OMP threads)."""
    source: str = ""


class MeasuredRange(BaseModel):
    """What the evidence covered: a question outside it is extrapolation (warned at use)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: list[int] = Field(default_factory=list)
    """The engine's caps the runs were measured at."""
    max_running: int = Field(0, ge=0)
    """The most requests seen running at once (the server's gauge, else the client's)."""
    max_context_tokens: int = Field(0, ge=0)
    """The longest context (prompt + output) of a measured request."""
    input_tokens: tuple[float, float] = (0.0, 0.0)
    """(min, max) of the runs' mean prompt lengths."""
    output_tokens: tuple[float, float] = (0.0, 0.0)
    request_rates: tuple[float, float] = (0.0, 0.0)
    """(min, max) achieved request rates (req/s)."""
    tensor_parallel_size: list[int] = Field(default_factory=list)


class Deployment(BaseModel):
    """The one deployment the runs measured (what a later question must match)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    """The engine's profile id (vllm, vllm-cpu, llama.cpp, sglang, …)."""
    engine_version: str | None = None
    model: str
    """The model as the simulator knows it (catalog name or a config.json path's name)."""
    device: DeviceSpec
    tensor_parallel_size: int = Field(1, ge=1)
    knobs: dict[str, int | float | bool | str | None] = Field(default_factory=dict)
    """The engine's knobs as recorded (the registry's names), at the fit configuration."""
    server_cmd: str | None = None


class Calibration(BaseModel):
    """What the simulator applies: constants replacing the catalog's step-time and host
    constants for this deployment (names of :class:`servetune.sim.efficiency.Efficiency`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """A short name for results and reports (the profile's file stem and a hash)."""
    deployment: Deployment
    constants: dict[str, float | bool] = Field(default_factory=dict)
    kv_cache_tokens: int | None = Field(default=None, ge=1)
    """The KV pool the server showed (its cache_config_info, or the slots × context it
    reported); None: the memory planner's."""
    measured: MeasuredRange = Field(default_factory=MeasuredRange)


class Constant(BaseModel):
    """One fitted constant: value, standard error, and how it was decided."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float
    std_error: float | None = None
    how: Literal["fitted", "catalog", "measured"] = "fitted"
    note: str = ""


class RunError(BaseModel):
    """Simulated against measured, for one run (relative errors, signed: + = sim higher)."""

    model_config = ConfigDict(extra="forbid")

    run: str
    label: str
    role: Literal["fit", "held_out"]
    measured: dict[str, float | None]
    simulated: dict[str, float | None]
    error: dict[str, float | None]


class Evidence(BaseModel):
    """One run given to calibrate: used, or refused with the reason."""

    model_config = ConfigDict(extra="forbid")

    run: str
    label: str
    requests: int = 0
    used: bool = True
    role: Literal["fit", "held_out", "refused"] = "fit"
    reason: str | None = None


class CalibrationProfile(BaseModel):
    """``calibration.json``."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = CALIBRATION_SCHEMA_VERSION
    kind: Literal["calibration"] = "calibration"
    created_at: str = ""
    servetune_version: str = ""
    calibration: Calibration
    fitted: list[Constant] = Field(default_factory=list)
    unidentified: dict[str, str] = Field(default_factory=dict)
    """Constants the data could not identify → why (they keep the catalog's value)."""
    evidence: list[Evidence] = Field(default_factory=list)
    holdout: str = ""
    """How the evidence was split (which runs were held out and why those)."""
    errors: list[RunError] = Field(default_factory=list)
    in_sample: dict[str, float | None] = Field(default_factory=dict)
    """Median |relative error| per figure over the fit runs."""
    held_out: dict[str, float | None] = Field(default_factory=dict)
    """Median |relative error| per figure over the held-out runs (None: nothing held out)."""
    catalog_held_out: dict[str, float | None] = Field(default_factory=dict)
    """The same held-out median errors with the catalog's constants (the uncalibrated
    simulator): what the calibration bought."""
    noise: dict[str, float | None] = Field(default_factory=dict)
    """Run-to-run noise per figure where the evidence has repeats (relative spread)."""
    warnings: list[str] = Field(default_factory=list)
    took_s: float = 0.0


def median_abs(values: list[float | None]) -> float | None:
    """The median of the finite |values| (None when there is none)."""
    xs = sorted(abs(v) for v in values if v is not None and math.isfinite(v))
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def write_calibration(path: str | Path, profile: CalibrationProfile) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / CALIBRATION_FILE
    return write_model_file(p, profile, hint="pass --out FILE elsewhere")


def read_calibration(path: str | Path) -> CalibrationProfile:
    """A calibration profile (a file, or a directory holding ``calibration.json``)."""
    return read_model_file(
        path, CalibrationProfile, "calibration", CALIBRATION_SCHEMA_VERSION, CALIBRATION_FILE
    )
