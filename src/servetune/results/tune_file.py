"""``tune.json``: what ``servetune tune`` found (and ``trials.jsonl``, one trial a line), for
scripts, ``servetune report`` and a study's workers on other hosts.

The study's spec (its space, SLOs and workload) is stored in the study itself, so a worker on
another host needs only its name and storage. Rates in req/s, latencies in ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from servetune.checks import SECONDS, Invalid
from servetune.profiles import ENGINE_IDS, find
from servetune.results.calibration_file import Calibration
from servetune.results.calibration_ref import CalibrationRef
from servetune.results.jsonfile import read_model_file, write_json_atomic
from servetune.results.schema import BenchConfig, Rate
from servetune.results.slo import SloSpec

TUNE_FILE = "tune.json"
TRIALS_FILE = "trials.jsonl"
SERVER_CMD_FILE = "server-cmd.txt"
"""In a launched trial's folder: the engine's command line, as it was started (what a
calibration on the trial's probes reads to identify the deployment)."""
CALIBRATION_PROFILE = "calibration.json"
"""``tune --calibrate``: the profile fitted on the trials so far, in the result folder."""
TUNE_SCHEMA_VERSION = 1

Objective = Literal["slo-max", "goodput", "throughput", "pareto"]
TrialStatus = Literal["ok", "no-rate", "rejected", "failed", "pruned", "duplicate"]
"""ok: measured; no-rate: measured, no rate met the SLOs; rejected: the memory planner (or
the knob rules) refused it, never launched; failed: the engine would not start or died under
load; pruned: could not beat the best so far (stopped early); duplicate: a point measured
before (its result reused)."""
DEFAULT = "default"
"""A knob's value "leave it to the engine": the engine's default configuration is the point
of the space with every dimension at ``DEFAULT``."""


def config_text(config: Mapping[str, Any]) -> str:
    """A configuration as a person reads it: ``max_num_seqs=64, max_num_batched_tokens=512``
    (``engine defaults`` when it sets nothing)."""
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "engine defaults"


class Dim(BaseModel):
    """One knob searched: its values in order (``DEFAULT`` first: the engine decides)."""

    name: str
    values: list[Any]

    def index(self, value: Any) -> int:
        for i, v in enumerate(self.values):
            if v == value and type(v) is type(value):
                return i
        raise ValueError(f"{value!r} is not a value of {self.name}")


class Space(BaseModel):
    """The knobs searched (built from the knob registry by ``tune.space``) and those fixed."""

    engine: str
    dims: list[Dim] = Field(default_factory=list)
    fixed: dict[str, Any] = Field(default_factory=dict)

    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= len(d.values)
        return n

    def dim(self, name: str) -> Dim:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(name)

    def config(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The knob values a point sets (``DEFAULT`` dropped, the fixed ones added)."""
        out = dict(self.fixed)
        for name, value in params.items():
            if value != DEFAULT or isinstance(value, bool):
                out[name] = value
        return out

    def default_params(self) -> dict[str, Any]:
        return {d.name: DEFAULT for d in self.dims}


class Probe(BaseModel):
    """One measured rate."""

    rate: Rate
    """req/s; ``inf`` (a closed-loop run: --objective throughput at the default rate) is
    written "inf" (a bare float would become null in JSON and not read back)."""
    meets: bool
    throughput: float = 0.0
    """Requests/s completed (achieved)."""
    offered: float | None = None
    """The rate the drawn arrivals realize (a short run's draw is off the nominal rate)."""
    limiting: str | None = None
    worst_ratio: float | None = None
    failed_share: float = 0.0
    figures: dict[str, float | None] = Field(default_factory=dict)
    error: str | None = None
    """Set when the probe could not be measured (the engine died): the search stops."""


class TuneSpec(BaseModel):
    """Everything a trial needs, stored in the study (``user_attrs['spec']``)."""

    engine: str
    """An engine profile's id (:mod:`servetune.profiles`), or "url" for a server already
    running."""
    model: str
    gpu: str | None = None
    """The GPU type (the simulated engine and the memory planner need it)."""
    gpus: list[str] = Field(default_factory=list)
    """Device ids given (CUDA_VISIBLE_DEVICES); their number bounds tensor parallelism."""
    base_url: str | None = None
    workload: BenchConfig
    """The base load of every probe (its rate is set per probe)."""
    slos: list[SloSpec] = Field(default_factory=list)
    objective: Objective = "slo-max"
    space: Space
    trials: int = Field(30, ge=1, examples=[30])
    time_budget_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, examples=[3600], json_schema_extra=SECONDS
    )
    repeats: int = Field(3, ge=1, examples=[3])
    top_k: int = Field(3, ge=1, examples=[3])
    mad_k: float = Field(1.0, ge=0, allow_inf_nan=False, examples=[1])
    """Rank by median − k·MAD; 0 for the median alone."""
    unstable_spread: float = Field(0.15, ge=0, allow_inf_nan=False)
    """Repeats whose (max − min) / median exceed this are flagged unstable."""
    seed: int = Field(0, ge=0)
    probes: int = Field(8, ge=2, examples=[8])
    tol: float = Field(0.05, gt=0, lt=1, allow_inf_nan=False)
    engine_options: dict[str, Any] = Field(default_factory=dict)
    """engines.commands.EngineOptions fields (executable, dtype, enforce_eager, …)."""
    ready_timeout_s: float = Field(
        300.0, gt=0, allow_inf_nan=False, examples=[600], json_schema_extra=SECONDS
    )
    warmup_requests: int = Field(8, ge=0)
    validate_top: int = Field(0, ge=0, examples=[3])
    """After a search on the simulated engine: re-measure the K best on a real engine."""
    validate_engine: str | None = None
    validate_model: str | None = None
    ofat: bool = True
    """Measure the one-knob-at-a-time table around the best (each neighbour is a launch)."""
    realtime: bool = False
    """``--engine sim`` only: launch the real-time simulated server per configuration (a real
    process loaded over HTTP, as a real engine is) instead of the offline virtual clock."""
    heartbeat_s: int = Field(10, ge=1, examples=[10])
    baseline: dict[str, Any] | None = None
    """``--baseline``: the configuration served today, as a point of the space (its params;
    the knobs it sets that are not searched are in ``space.fixed``). The gain is measured
    over it, in the same study. None: over the engine's default."""
    baseline_text: str | None = None
    """``--baseline`` as given."""

    @field_validator("engine", "validate_engine")
    @classmethod
    def _known_engine(cls, value: str | None) -> str | None:
        if value is None or value == "url":
            return value
        found = find(value)
        if found is None:
            raise Invalid(
                f"unknown engine {value!r}", hint="choose one of: " + ", ".join(ENGINE_IDS)
            )
        return found.id

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        simulated = (found := find(self.engine)) is not None and found.simulated
        if self.validate_top and (not simulated or not self.validate_engine):
            raise Invalid(
                "{validate_top} re-measures a simulated search on a real engine",
                hint="use it with {engine} sim and {validate_engine} vllm ({validate_model} …)",
            )
        if self.realtime and not simulated:
            raise Invalid("{realtime} applies to {engine} sim only")
        if self.calibrate and simulated:
            raise Invalid(
                "{calibrate} fits the simulator to a real engine's trials; {engine} sim has "
                "nothing to fit it to",
                hint="tune a real engine ({engine} vllm, vllm-cpu, llama.cpp, …) with it",
            )
        if self.calibrate and self.objective != "slo-max":
            raise Invalid(
                "{calibrate} judges the simulator by its SLO-max predictions",
                hint="use it with {objective} slo-max",
            )
        return self

    def reference_params(self) -> dict[str, Any]:
        """The point the gain is measured over: the baseline, or the engine's default."""
        return dict(self.baseline) if self.baseline is not None else self.space.default_params()

    @property
    def reference_label(self) -> str:
        """``your baseline`` or ``the engine's default``."""
        return "your baseline" if self.baseline is not None else "the engine's default"

    @property
    def launches(self) -> bool:
        """Each configuration is a launched engine (not the offline simulated engine)."""
        found = find(self.engine)
        return found is None or not found.simulated or self.realtime

    sim_gpu: str | None = None
    sim_model: str | None = None
    """The catalog entries the simulated engine predicts with (warm start, pruning)."""
    calibration: Calibration | None = None
    """``--calibration``: the constants the simulated engine runs with (``--engine sim``'s
    trials, a real engine's screening, warm start and predictions); carried in the study so
    that a worker on another host applies the same."""
    calibration_ref: CalibrationRef | None = None
    """Which profile that was (its id and file)."""
    calibrate: bool = False
    """``--calibrate``: a real engine's launched trials calibrate the simulator as they go —
    after each, the simulator is refitted on every trial's probes so far; its predictions
    start and prune the next trials, and its best untried configurations are queued next."""


class TrialRecord(BaseModel):
    """One trial, as ``trials.jsonl`` and ``tune.json`` hold it."""

    number: int
    params: dict[str, Any]
    config: dict[str, Any]
    status: TrialStatus
    value: float | None = None
    """The objective (SLO-max req/s, goodput, throughput)."""
    slo_max: float | None = None
    upper: float | None = None
    p99_latency_ms: float | None = None
    throughput: float | None = None
    predicted: float | None = None
    """The simulated engine's SLO-max for this configuration (the search's start); under
    ``--calibrate``, with the profile fitted on the trials before it, when there was one."""
    predicted_catalog: float | None = None
    """``--calibrate``: the catalog's prediction of the same (the simulator uncalibrated),
    beside ``predicted`` when a profile made that."""
    calibrated_on: int | None = None
    """``--calibrate``: how many earlier trials the profile behind ``predicted`` was fitted on."""
    saturation: float | None = None
    """Requests/s it completed with every request sent at once: the SLO-max search stays at
    or below it (a rate the server cannot complete is not served, however loose the SLOs)."""
    limiting: str | None = None
    reason: str | None = None
    """Why it was rejected or failed (the planner's or the engine's log line)."""
    probes: list[Probe] = Field(default_factory=list)
    duration_s: float = 0.0
    worker: str | None = None
    role: str | None = None
    """Why the study ran it: ``default`` / ``baseline`` (the reference, first),
    ``warm-start`` (the simulated engine's pick), ``refine`` (one knob from the best so far,
    ``refined_from``); None: the sampler's."""
    refined_from: int | None = None

    @property
    def is_default(self) -> bool:
        """The engine's default configuration (every searched knob left to the engine)."""
        return all(v == DEFAULT and not isinstance(v, bool) for v in self.params.values())


class Repeat(BaseModel):
    params: dict[str, Any]
    config: dict[str, Any]
    values: list[float | None]
    median: float | None = None
    mad: float | None = None
    score: float | None = None
    """median − k·MAD: the ranking under noise."""
    unstable: bool = False
    note: str = ""
    edge_ratios: list[float] = Field(default_factory=list)
    """Each draw's worst SLO figure / its limit at the configuration's first SLO-max (the
    search's probe there and each repeat's first, all at that rate): their spread is the
    draw-to-draw noise the longer check weighs its margin against."""

    @property
    def measured(self) -> list[float]:
        return [v for v in self.values if v is not None]

    @property
    def failed(self) -> bool:
        """The engine failed in a repeat (``values`` holds None there)."""
        return any(v is None for v in self.values)


class Confirmation(BaseModel):
    """A reported SLO-max checked on a probe ``length``× as long as the search's (another draw
    of the workload), stepping down while it missed: a short probe near capacity can meet
    loose SLOs that a longer run at the same rate breaks."""

    params: dict[str, Any]
    config: dict[str, Any]
    reported: float
    """The figure checked: the median of its repeats, or its one measurement."""
    length: int
    """How many times the search's probe (``--num-prompts``, or ``--duration``)."""
    sustained: float | None = None
    """The highest rate that met the SLOs on the long probe (0: none tried did; None: the
    engine failed)."""
    draws: int = 1
    """How many draws of the long probe held ``sustained``: 2 when the first met the SLOs
    with a margin under ``noise`` (and a second, independent draw held too), else 1."""
    noise: float | None = None
    """The draw-to-draw noise (standard deviation of the worst SLO figure / its limit) the
    first draw's margin was weighed against."""
    probes: list[Probe] = Field(default_factory=list)
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.sustained is None


class OfatRow(BaseModel):
    knob: str
    value: Any
    direction: Literal["best", "down", "up"]
    status: str = "ok"
    figures: dict[str, float | None] = Field(default_factory=dict)


class Validation(BaseModel):
    """One of the best simulated configurations measured on a real engine."""

    config: dict[str, Any]
    simulated: float | None = None
    measured: float | None = None
    status: str = "ok"
    reason: str | None = None
    probes: list[Probe] = Field(default_factory=list)


class CalibrationStep(BaseModel):
    """One refit of the simulator during ``tune --calibrate``."""

    after_trial: int
    trials: int = Field(ge=0)
    """Launched trials whose probes it was fitted on."""
    runs: int = Field(ge=0)
    """Probe runs used (the rest refused, each with its reason in the profile)."""
    constants: dict[str, float | bool] = Field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    """Why this refit did not make a profile (the calibration's refusal); the previous one,
    or the catalog, keeps predicting."""
    enqueued: list[dict[str, Any]] = Field(default_factory=list)
    """The configurations the calibrated simulator ranked best among those not yet tried,
    queued next."""


class CalibrationGain(BaseModel):
    """Median |predicted − measured| / measured of the SLO-max, over the trials a profile
    predicted before they ran (each by the profile fitted on the trials before it), for the
    calibrated and the catalog's simulator alike."""

    trials: int = Field(ge=0)
    calibrated_error: float | None = None
    catalog_error: float | None = None
    rank_agreement_calibrated: float | None = None
    """Share of those trials' pairs the calibrated predictions order as measured."""
    rank_agreement_catalog: float | None = None


class TuneResult(BaseModel):
    """``tune.json``."""

    schema_version: int = TUNE_SCHEMA_VERSION
    kind: Literal["tune"] = "tune"
    status: Literal["running", "complete", "interrupted", "failed", "no-config-meets"] = "running"
    study: str
    storage: str
    spec: TuneSpec
    trials: list[TrialRecord] = Field(default_factory=list)
    best: TrialRecord | None = None
    best_command: str | None = None
    default: TrialRecord | None = None
    """The engine's default configuration, when the study measured it (always, without
    ``--baseline``)."""
    gain_over_default: float | None = None
    """best / default − 1 on the objective, both measured in this study (medians of their
    repeats when repeated)."""
    baseline: TrialRecord | None = None
    """The reference the gain is measured over: ``--baseline``'s configuration, or the
    engine's default (then the same trial as ``default``)."""
    gain_over_baseline: float | None = None
    """best / baseline − 1 on the objective (medians of their repeats), both measured in this
    study."""
    gain_beyond_noise: bool | None = None
    """The best's lowest measurement is above the baseline's highest (None: not both measured
    at least twice, so there is no spread to judge the gain against)."""
    repeats: list[Repeat] = Field(default_factory=list)
    confirmations: list[Confirmation] = Field(default_factory=list)
    """The best's and the baseline's SLO-max checked on longer probes: a reported figure is
    never above the rate its configuration held there."""
    ofat: list[OfatRow] = Field(default_factory=list)
    ofat_rate: float | None = None
    """The request rate of the one-knob-at-a-time table: the best's lowest SLO-max over its
    repeats (the rate it held in every draw of the workload)."""
    pareto: list[TrialRecord] = Field(default_factory=list)
    validation: list[Validation] = Field(default_factory=list)
    calibration_steps: list[CalibrationStep] = Field(default_factory=list)
    """``--calibrate``: each refit of the simulator on the trials so far."""
    calibration_gain: CalibrationGain | None = None
    """``--calibrate``: the calibrated predictions against the catalog's, on the trials each
    predicted before it ran (what calibrating as it goes bought)."""
    verdict: str = ""
    warnings: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _reference_of_older_files(self) -> TuneResult:
        """A tune.json written before ``--baseline`` measured its gain over the engine's
        default: that is its baseline."""
        if self.baseline is None and self.spec.baseline is None and self.default is not None:
            self.baseline = self.default
            if self.gain_over_baseline is None:
                self.gain_over_baseline = self.gain_over_default
        return self


def write_tune_result(out_dir: Path, result: TuneResult) -> Path:
    """``out_dir/tune.json``, atomically (a kill leaves the previous version whole)."""
    return write_json_atomic(out_dir / TUNE_FILE, result.model_dump(mode="json"))


def read_tune_result(path: str | Path) -> TuneResult:
    """``tune.json`` (or a tune result directory holding it)."""
    return read_model_file(path, TuneResult, "tune", TUNE_SCHEMA_VERSION, TUNE_FILE)
