"""The model catalog: named models (``data/models.json``) and local config.json files.

An entry is either written out (the dense models of the first catalog: the Architecture's
fields) or points at a Hugging Face ``config.json`` shipped under ``data/configs/`` (read by
:mod:`servetune.arch.families`), with the model card's parameter counts and the sources of
both. Names match case-insensitively by name or alias (:mod:`servetune.arch.lookup`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servetune.arch.architecture import Architecture
from servetune.arch.families import read_config
from servetune.arch.lookup import match, norm
from servetune.errors import SimError


class CardCounts(BaseModel):
    """What a model card says of its size (the check of the parameter arithmetic)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_params: float = Field(gt=0)
    rounded_to: float = Field(default=0, ge=0)
    """The card's precision (30.5B: 0.1B); 0: an exact count."""
    tolerance: float = Field(default=0.01, gt=0)
    active_params: float | None = Field(default=None, gt=0)
    active_rounded_to: float = Field(default=0, ge=0)
    active_excludes_embedding: bool = False
    """The card counts the lm_head but not the input embedding (DeepSeek, OpenAI)."""
    non_embedding_params: float | None = Field(default=None, gt=0)
    """Parameters without the embedding table and the lm_head (Qwen's cards)."""
    mtp_included: bool | None = None
    """Whether the card's total counts the MTP layers (DeepSeek-V3: 671B without, 685B
    with)."""
    source: str

    def within(self, computed: float, card: float, rounded_to: float) -> bool:
        """Is ``computed`` the card's figure within 1%, the card read at its own precision
        (30.5B is anything from 30.45B to 30.55B)?"""
        return abs(computed - card) <= self.tolerance * card + rounded_to / 2


def _data_dir() -> Any:
    return resources.files("servetune.arch.data")


def _entry(e: dict[str, Any]) -> Architecture:
    if "config" not in e:
        return Architecture.model_validate(e)
    cfg = json.loads(_data_dir().joinpath(e["config"]).read_text("utf-8"))
    arch = read_config(cfg, e["name"], e.get("source", ""))
    extra: dict[str, Any] = {k: e[k] for k in ("aliases", "uncertain") if k in e}
    return arch.model_copy(update=extra)


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[Architecture, CardCounts | None], ...]:
    raw = json.loads(_data_dir().joinpath("models.json").read_text("utf-8"))["models"]
    return tuple(
        (_entry(e), CardCounts.model_validate(e["card"]) if "card" in e else None) for e in raw
    )


def models() -> tuple[Architecture, ...]:
    return tuple(a for a, _ in _catalog())


def card_counts(name: str) -> CardCounts | None:
    """The model card's counts of a catalog model (None when the entry has none)."""
    for arch, card in _catalog():
        if arch.name == name:
            return card
    return None


def model_from_hf_config(path: str | Path) -> Architecture:
    """The architecture of a local Hugging Face ``config.json`` (or the folder holding it)."""
    p = Path(path).expanduser()
    file = p / "config.json" if p.is_dir() else p
    try:
        cfg = json.loads(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SimError(
            f"cannot read model config {file}: {exc}",
            hint="give a Hugging Face config.json (or its folder) or a catalog name",
            code="sim.catalog",
        ) from exc
    if not isinstance(cfg, dict):  # a JSON array or a bare value: no field to read
        raise SimError(
            f"{file} is not a model config: expected a JSON object of fields, found "
            f"{type(cfg).__name__}",
            hint="give a Hugging Face config.json (or its folder) or a catalog name",
            code="sim.catalog",
        )
    name = str(cfg.get("_name_or_path") or p.parent.name if p.is_file() else p.name)
    return read_config(cfg, name, str(file))


NAME_FORMATS: tuple[tuple[str, str], ...] = (
    ("-fp8", "fp8"),
    ("-nvfp4", "nvfp4"),
    ("-fp4", "nvfp4"),
    ("-mxfp4", "mxfp4"),
    ("-awq", "awq"),
    ("-gptq", "gptq"),
)
"""A checkpoint's name part → the format its weights are published in (the Hugging Face
convention: Qwen/Qwen3-30B-A3B-FP8, nvidia/...-FP4, RedHatAI/...-FP8-dynamic)."""


def published_format(name: str) -> str | None:
    """The weights' format a checkpoint's name says (None: the name says nothing)."""
    last = norm(name).split("/")[-1]
    for part, fmt in NAME_FORMATS:
        if part + "-" in last + "-":
            return fmt
    return None


def find_model(name: str) -> Architecture:
    """A catalog model by name or alias, or a local config.json path. An alias naming a
    quantized checkpoint of a 16-bit entry (``-FP8``, ``-AWQ``, ...) is that architecture in
    the checkpoint's format, as the engine would load it."""
    p = Path(name).expanduser()
    if name.endswith(".json") or (p.is_dir() and (p / "config.json").is_file()):
        return model_from_hf_config(p)
    arch = match(name, models(), "model", "--model")
    fmt = published_format(name)
    if fmt is not None and arch.checkpoint_quantization is None:
        return arch.model_copy(update={"checkpoint_quantization": fmt})
    return arch
