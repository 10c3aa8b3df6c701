"""The simulated engine's flags for every command that starts or simulates it (``sim serve``,
``sim run``, ``sim plan``, ``bench``/``sweep`` without ``--base-url``): its knobs come from the
knob registry (``servetune.knobs``, engine ``sim``: vLLM's spelling), plus what is not a vLLM
knob (the GPU and model to simulate, the served name, the interconnect). Cheap to import:
argparse and the registry only."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from servetune.knobs.cli import add_knob_arguments, knob_values
from servetune.sim.config import SIM_KNOBS, EngineConfig

DEFAULT_GPU = "A100-80GB"
DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def add_engine_arguments(p: argparse._ActionsContainer, shared: Iterable[str] = ()) -> None:
    """The engine's flags on P (a parser or an argument group). SHARED: flags the command
    defines itself and the engine reads too (``bench`` owns ``--model``); they are not added
    again, and a clash with any other flag is an error, never silently skipped."""
    skip = set(shared)
    p.add_argument(
        "--gpu",
        default=None,
        help=f"GPU from `servetune sim gpus` (default: {DEFAULT_GPU})",
    )
    if "model" not in skip:
        p.add_argument(
            "--model",
            default=None,
            help="model from `servetune sim models`, a Hugging Face id, or a local config.json "
            f"(default: {DEFAULT_MODEL})",
        )
    add_knob_arguments(p, [k for k in SIM_KNOBS if k not in skip], engine="sim")
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
        "--spec-acceptance-rate",
        type=float,
        default=None,
        metavar="A",
        help="(not a vLLM flag) with --speculative-method: the share of drafted tokens the "
        "target accepts, 0-1 (default: the method's published figure; ngram needs it)",
    )


def engine_flags_given(args: argparse.Namespace) -> list[str]:
    """The simulated engine's own flags given on the command line (not --model and
    --served-model-name, which name the target too): with --base-url they configure
    nothing, and taking them silently would let a user believe the server runs with them."""
    dests = [
        "gpu",
        "interconnect_gb_s",
        "spec_acceptance_rate",
        *(k for k in SIM_KNOBS if k != "served_model_name"),
    ]
    return ["--" + d.replace("_", "-") for d in dests if getattr(args, d, None) is not None]


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
    """An EngineConfig from parsed flags (absent flags keep vLLM's defaults)."""
    fields: dict[str, Any] = {
        "gpu": getattr(args, "gpu", None) or DEFAULT_GPU,
        "model": getattr(args, "model", None) or DEFAULT_MODEL,
        "served_model_name": getattr(args, "served_model_name", None),
        "interconnect_gb_s": getattr(args, "interconnect_gb_s", None),
        "spec_acceptance_rate": getattr(args, "spec_acceptance_rate", None),
        **knob_values(args, SIM_KNOBS),
    }
    return EngineConfig(**fields)
