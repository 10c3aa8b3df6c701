"""The hardware catalog: each accelerator's memory, peak dense throughput per precision,
memory bandwidth and intra-node link (``data/gpus.json``, a source per entry). Prices are not
a property of the hardware: they live in the price catalog (``servetune.cost``,
``cost/data/prices.json``), one offer per provider with its source."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servetune.arch.lookup import CatalogEntryNotFound, match, norm

Vendor = Literal["nvidia", "amd", "cpu"]


class GpuSpec(BaseModel):
    """One accelerator: memory, peak dense tensor throughput and memory bandwidth."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    vendor: Vendor = "nvidia"
    generation: str = ""
    """The architecture generation (ampere, ada, hopper, blackwell, cdna3, cdna4): which
    precisions its tensor cores run natively (:mod:`servetune.arch.precision`)."""
    memory_gb: float = Field(gt=0)
    usable_gib: float = Field(gt=0)
    """Total device memory as vLLM sees it (what gpu_memory_utilization multiplies)."""
    mem_type: str = ""
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    """Dense FP8 peak; None where the tensor cores have no FP8."""
    fp4_tflops: float | None = Field(default=None, gt=0)
    """Dense FP4 peak (MXFP4/NVFP4); None where the tensor cores have no FP4."""
    hbm_gb_s: float = Field(gt=0)
    interconnect: str = ""
    interconnect_gb_s: float = Field(default=32.0, gt=0)
    """Per GPU, one direction: what an all-reduce or all-to-all moves through."""
    source: str = ""
    uncertain: list[str] = Field(default_factory=list)


def _data(name: str) -> Any:
    return json.loads(resources.files("servetune.arch.data").joinpath(name).read_text("utf-8"))


@lru_cache(maxsize=1)
def gpus() -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec.model_validate(g) for g in _data("gpus.json")["gpus"])


def find_gpu(name: str) -> GpuSpec:
    return match(name, gpus(), "gpu", "--gpu")


def gpu_alias_note(name: str) -> str | None:
    """A line for the user when ``--gpu NAME`` is not a GPU's own name but picks one by alias
    (``a100`` is the A100-80GB), naming the other GPUs of the catalog it could have meant;
    None for a GPU's own name (any case) or an unknown one (an error elsewhere)."""
    try:
        gpu = find_gpu(name)
    except CatalogEntryNotFound:
        return None
    key = norm(name)
    if re.sub(r"[^a-z0-9]", "", key) == re.sub(r"[^a-z0-9]", "", norm(gpu.name)):
        return None  # its own name, spelled with other separators
    also = [
        g.name
        for g in gpus()
        if g.name != gpu.name
        and any(norm(n) == key or norm(n).startswith(key + "-") for n in [g.name, *g.aliases])
    ]
    return f"--gpu {name} is taken as {gpu.name}" + (
        f" (the catalog also has {', '.join(also)}: name it to use that one)" if also else ""
    )
