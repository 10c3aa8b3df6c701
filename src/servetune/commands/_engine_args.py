"""The simulated engine's flags for every command that starts or simulates it (``sim serve``,
``sim run``, ``sim plan``, ``bench``/``sweep`` without ``--base-url``): its knobs come from the
knob registry (``servetune.knobs``, engine ``sim``: vLLM's spelling), plus what is not a vLLM
knob (the GPU and model to simulate, the served name, the interconnect). Cheap to import:
argparse and the registry only."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from servetune.knobs.cli import add_knob_arguments, knob_flag_name, knob_values
from servetune.knobs.model import Spelling
from servetune.knobs.registry import knob, spelling
from servetune.sim.config import SIM_KNOBS, EngineConfig
from servetune.sim.semantics import SGLANG_SRT, semantics_of, simulated_engines

DEFAULT_GPU = "A100-80GB"
DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"
SGLANG_DEST = "sglang__"
"""Prefix of the parsed destinations of SGLang's spellings (``--mem-fraction-static`` →
``sglang__gpu_memory_utilization``): kept apart so that a spelling of the other engine is an
error, not a silent change of meaning."""
SGLANG_SHORT = {"tensor_parallel_size": ("--tp",), "data_parallel_size": ("--dp",)}
"""The short forms SGLang's documentation uses (``--tp 8 --dp 8``)."""


def _sglang_spellings(p: argparse._ActionsContainer, names: Iterable[str]) -> None:
    """SGLang's flag for each knob whose SGLang spelling differs from the knob's own (read
    with --engine sglang): value flags take the knob's type, ``--disable-…`` switches set it
    off."""
    taken = set(getattr(p, "_option_string_actions", {}))
    for name in names:
        s = spelling("sglang", name)
        if not isinstance(s, Spelling) or s.env:
            continue
        flags = [
            f
            for f in (s.flag, *s.aliases, *SGLANG_SHORT.get(name, ()))
            if f != knob_flag_name(name) and f not in taken
        ]
        if not flags:
            continue
        k = knob(name)
        dest = SGLANG_DEST + name
        text = f"SGLang's spelling of --{name.replace('_', '-')} (with --engine sglang)"
        if s.style == "switch":
            p.add_argument(*flags, dest=dest, action="store_const", const=s.on, help=text)
        elif s.style == "value" and k.type in ("int", "float", "choice"):
            kind: type = int if k.type == "int" else float if k.type == "float" else str
            meta = "N" if k.type == "int" else "X" if k.type == "float" else "V"
            p.add_argument(*flags, dest=dest, type=kind, default=None, metavar=meta, help=text)
        else:
            continue
        taken.update(flags)


def add_engine_arguments(p: argparse._ActionsContainer, shared: Iterable[str] = ()) -> None:
    """The engine's flags on P (a parser or an argument group). SHARED: flags the command
    defines itself and the engine reads too (``bench`` owns ``--model``); they are not added
    again, and a clash with any other flag is an error, never silently skipped."""
    skip = set(shared)
    p.add_argument(
        "--engine",
        choices=simulated_engines(),
        default=None,
        help="whose semantics the simulated engine follows: vLLM V1's scheduler, memory "
        "planner, defaults and /metrics, or SGLang's (default: vllm)",
    )
    p.add_argument(
        "--sglang-version",
        default=None,
        help="(--engine sglang) the SGLang release whose defaults and memory rules are "
        "simulated, e.g. 0.4.6 (default: the newest rules)",
    )
    p.add_argument(
        "--gpu",
        default=None,
        help=f"GPU from `servetune sim gpus` (default: {DEFAULT_GPU})",
    )
    add_installation_arguments(p)
    if "model" not in skip:
        p.add_argument(
            "--model",
            default=None,
            help="model from `servetune sim models`, a Hugging Face id, or a local config.json "
            f"(default: {DEFAULT_MODEL})",
        )
    add_knob_arguments(p, [k for k in SIM_KNOBS if k not in skip], engine="sim")
    _sglang_spellings(p, [k for k in SIM_KNOBS if k not in skip])
    if "served_model_name" not in skip:
        p.add_argument(
            "--served-model-name", default=None, help="the name it serves (default: the model)"
        )
    p.add_argument(
        "--interconnect-gb-s",
        type=float,
        default=None,
        help="(not a vLLM flag) all-reduce bandwidth between the GPUs, GB/s, when it is not "
        "the catalog's",
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="PROFILE",
        help="(not a vLLM flag) simulate with the constants `servetune sim calibrate` fitted "
        "to a deployment's own runs (its calibration.json); unset --gpu, --model and knobs "
        "take the deployment's",
    )
    p.add_argument(
        "--spec-acceptance-rate",
        type=float,
        default=None,
        metavar="A",
        help="(not a vLLM flag) with --speculative-method: the share of drafted tokens the "
        "target accepts, 0-1 (default: the method's published figure; ngram needs it)",
    )


INSTALLATION = {
    "vllm_version": "--vllm-version",
    "sampler": "--vllm-sampler",
    "hopper_mxfp4": "--hopper-mxfp4-kernel",
}
"""EngineConfig's fields that say which vLLM installation is simulated (not vLLM flags), and
their flags."""


def add_installation_arguments(p: argparse._ActionsContainer) -> None:
    """The vLLM installation simulated: its release and, where they differ from the release's
    image, its profiling sampler and Hopper MXFP4 kernel (each sizes the KV pool)."""
    p.add_argument(
        INSTALLATION["vllm_version"],
        default=None,
        metavar="V",
        help="(not a vLLM flag) the vLLM release whose start-up memory planner sizes the KV "
        "pool, e.g. 0.8.5, 0.10.1, 0.11.0, 0.19, v0 (default: the 0.11-0.16 rules)",
    )
    p.add_argument(
        INSTALLATION["sampler"],
        dest="sampler",
        choices=("flashinfer", "pytorch"),
        default=None,
        help="(not a vLLM flag; V1 0.8-0.16) the top-k/top-p kernel the installation's "
        "profiling run samples with, where not the release's: flashinfer (gpustack images, "
        "VLLM_USE_FLASHINFER_SAMPLER=1) or pytorch (vLLM's own 0.11 image)",
    )
    p.add_argument(
        INSTALLATION["hopper_mxfp4"],
        dest="hopper_mxfp4",
        choices=("marlin", "triton"),
        default=None,
        help="(not a vLLM flag) the MXFP4 expert kernel on Hopper, where not the release "
        "image's: marlin (vLLM's pip wheel, no triton_kernels) or triton",
    )


def installation_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The installation flags given, as EngineConfig fields."""
    return {k: v for k in INSTALLATION if (v := getattr(args, k, None)) is not None}


def engine_flags_given(args: argparse.Namespace) -> list[str]:
    """The simulated engine's own flags given on the command line (not --model and
    --served-model-name, which name the target too): with --base-url they configure
    nothing, and taking them silently would let a user believe the server runs with them."""
    dests = [
        "engine",
        "sglang_version",
        "gpu",
        "interconnect_gb_s",
        "spec_acceptance_rate",
        "calibration",
        *INSTALLATION,
        *(k for k in SIM_KNOBS if k != "served_model_name"),
    ]
    out = ["--" + d.replace("_", "-") for d in dests if getattr(args, d, None) is not None]
    for k in SIM_KNOBS:
        if getattr(args, SGLANG_DEST + k, None) is not None:
            s = spelling("sglang", k)
            out.append(s.flag if isinstance(s, Spelling) else knob_flag_name(k))
    return out


def refuse_engine_flags_with_base_url(args: argparse.Namespace) -> None:
    """A ConfigError when --base-url is given together with the simulated engine's flags."""
    from servetune.errors import ConfigError

    given = engine_flags_given(args)
    if getattr(args, "base_url", None) and given:
        raise ConfigError(
            f"{', '.join(given)}: these configure the simulated engine, which does not run "
            "with --base-url (the server there is already configured)",
            hint="drop them, or drop --base-url to measure the simulated engine with them "
            "(record a real server's flags with --server-cmd)",
        )


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """An EngineConfig from parsed flags (absent flags keep the engine's defaults). SGLang's
    spellings (``--mem-fraction-static``) need ``--engine sglang`` and may not be given beside
    the same knob's own flag; the values are the model's to check."""
    from pydantic import ValidationError

    from servetune.errors import ConfigError
    from servetune.sim.config import refusal

    engine = getattr(args, "engine", None) or "vllm"
    fields: dict[str, Any] = {
        "engine": engine,
        "gpu": getattr(args, "gpu", None) or DEFAULT_GPU,
        "model": getattr(args, "model", None) or DEFAULT_MODEL,
        "served_model_name": getattr(args, "served_model_name", None),
        "interconnect_gb_s": getattr(args, "interconnect_gb_s", None),
        "spec_acceptance_rate": getattr(args, "spec_acceptance_rate", None),
        **knob_values(args, SIM_KNOBS),
        **installation_fields(args),
    }
    if getattr(args, "sglang_version", None):
        fields["sglang_version"] = args.sglang_version
    for k in SIM_KNOBS:
        value = getattr(args, SGLANG_DEST + k, None)
        if value is None:
            continue
        s = spelling("sglang", k)
        flag = s.flag if isinstance(s, Spelling) else k
        if semantics_of(engine) != SGLANG_SRT:
            raise ConfigError(
                f"{flag} is SGLang's flag; the simulated engine follows vLLM unless told",
                hint=f"add --engine sglang, or use {knob_flag_name(k)} (vLLM's meaning)",
            )
        if fields.get(k) is not None:
            raise ConfigError(
                f"{flag} and {knob_flag_name(k)} set the same knob",
                hint="give one of them",
            )
        fields[k] = value
    if getattr(args, "calibration", None):
        with_calibration(fields, args)
    try:
        return EngineConfig(**fields)
    except ValidationError as exc:  # the model's ranges and rules, shown with the flags
        raise refusal(exc) from None


def with_calibration(fields: dict[str, Any], args: argparse.Namespace) -> None:
    """``fields`` with ``--calibration``'s profile: its calibration, and the deployment's
    device, model and knobs where no flag set them."""
    from servetune.results.calibration_file import read_calibration

    cal = read_calibration(args.calibration).calibration
    dep = cal.deployment
    fields["calibration"] = cal
    if not getattr(args, "gpu", None):
        fields["gpu"] = dep.device.name
    if not getattr(args, "model", None):
        fields["model"] = dep.model
    for k, v in dep.knobs.items():
        if k in SIM_KNOBS and k != "served_model_name" and fields.get(k) is None:
            fields[k] = v
