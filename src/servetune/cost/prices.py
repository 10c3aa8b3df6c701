"""The price catalog: list prices per GPU-hour, with where and when each was published.

``data/prices.json`` holds *offers*: one GPU at one provider under one pricing model
(``on-demand``, ``spot``, ``reserved-1y``, ``reserved-3y``), in USD per GPU-hour, with its
source page, the date read and, when it was taken from a public transcription rather than
read first-hand, that transcription (``via``). Nothing is fetched at run time.

A :class:`PriceBook` picks one price per GPU: a ``--price GPU=USD_PER_HOUR`` override when
given, else the cheapest offer under the chosen pricing model (optionally from one provider).
GPU names are the simulated engine's catalog names (``servetune sim gpus``), matched with its
aliases, so ``a100`` and ``A100-80GB`` are the same GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servetune.arch.gpus import find_gpu, gpus
from servetune.errors import ConfigError, ServetuneError
from servetune.results.cost_file import PriceUsed

Pricing = Literal["on-demand", "spot", "reserved-1y", "reserved-3y"]
PRICINGS: tuple[str, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")


class Offer(BaseModel):
    """One published price."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    gpu: str
    provider: str
    pricing: Pricing
    usd_per_gpu_hour: float
    product: str = ""
    gpus_per_instance: int = 1
    source: str
    read_on: str
    via: str | None = None
    note: str | None = None


class Price(PriceUsed):
    """The price used for one GPU type, and where it came from (what cost.json records of it,
    plus the catalog's note)."""

    note: str | None = None

    def describe(self) -> str:
        if self.pricing == "override":
            return f"{self.gpu} ${self.usd_per_gpu_hour:g}/GPU-hour (--price)"
        where = f"{self.provider} {self.pricing}" if self.provider else self.pricing
        return (
            f"{self.gpu} ${self.usd_per_gpu_hour:g}/GPU-hour ({where}, {self.product}; "
            f"{self.source}, read {self.read_on})"
        )


@lru_cache(maxsize=1)
def offers() -> tuple[Offer, ...]:
    text = resources.files("servetune.cost.data").joinpath("prices.json").read_text("utf-8")
    return tuple(Offer.model_validate(o) for o in json.loads(text)["offers"])


def canonical_gpu(name: str) -> str:
    """The catalog name of ``name`` (an alias is fine); ConfigError with suggestions if none."""
    try:
        return find_gpu(name).name
    except ServetuneError as exc:
        raise ConfigError(
            f"unknown GPU {name!r}",
            hint=exc.hint or "see `servetune sim gpus` for the GPU names",
        ) from None


def parse_price_overrides(items: Sequence[str] | None) -> dict[str, float]:
    """``["A100-80GB=1.8", …]`` → {catalog GPU name: USD per GPU-hour}."""
    out: dict[str, float] = {}
    for item in items or ():
        gpu, sep, value = item.partition("=")
        if not sep or not gpu.strip() or not value.strip():
            raise ConfigError.over_fields(
                f"{{price}} {item!r} is not GPU=USD_PER_HOUR",
                hint="e.g. A100-80GB=1.80 (US dollars per GPU per hour)",
            )
        try:
            usd = float(value.strip().lstrip("$"))
        except ValueError:
            raise ConfigError.over_fields(
                f"{{price}} {item!r}: {value.strip()!r} is not a number",
                hint="e.g. A100-80GB=1.80 (US dollars per GPU per hour)",
            ) from None
        if not usd > 0 or usd != usd or usd == float("inf"):
            raise ConfigError.over_fields(
                f"{{price}} {item!r}: the price must be a positive number of USD per GPU-hour"
            )
        out[canonical_gpu(gpu.strip())] = usd
    return out


class PriceBook:
    """Prices per GPU type: overrides first, else the catalog's cheapest matching offer."""

    def __init__(
        self,
        pricing: str = "on-demand",
        provider: str | None = None,
        overrides: dict[str, float] | None = None,
        catalog: Iterable[Offer] | None = None,
    ) -> None:
        if pricing not in PRICINGS:
            raise ConfigError(
                f"unknown pricing {pricing!r}", hint=f"use one of: {', '.join(PRICINGS)}"
            )
        self.pricing = pricing
        self.provider = provider.lower() if provider else None
        self.overrides = dict(overrides or {})
        self.catalog = tuple(catalog if catalog is not None else offers())
        if self.provider and not any(o.provider == self.provider for o in self.catalog):
            known = sorted({o.provider for o in self.catalog})
            raise ConfigError.over_fields(
                f"no prices from provider {provider!r} in the catalog",
                hint=f"known providers: {', '.join(known)} (or give a price, {{price}} GPU=USD)",
            )

    def candidates(self, gpu: str) -> list[Offer]:
        name = canonical_gpu(gpu)
        return sorted(
            (
                o
                for o in self.catalog
                if o.gpu == name
                and o.pricing == self.pricing
                and (self.provider is None or o.provider == self.provider)
            ),
            key=lambda o: o.usd_per_gpu_hour,
        )

    def has(self, gpu: str) -> bool:
        return canonical_gpu(gpu) in self.overrides or bool(self.candidates(gpu))

    def price(self, gpu: str) -> Price:
        """The price of one ``gpu`` for an hour; ConfigError saying what exists if none."""
        name = canonical_gpu(gpu)
        if name in self.overrides:
            return Price(gpu=name, usd_per_gpu_hour=self.overrides[name], pricing="override")
        found = self.candidates(name)
        if not found:
            have = sorted(
                {
                    f"{o.provider} {o.pricing} ${o.usd_per_gpu_hour:g}"
                    for o in self.catalog
                    if o.gpu == name
                }
            )
            where = f" from {self.provider}" if self.provider else ""
            raise ConfigError.over_fields(
                f"no {self.pricing} price{where} for {name} in the price catalog",
                hint=(f"the catalog has: {'; '.join(have)}. " if have else "")
                + f"Give one with {{price}} {name}=USD_PER_HOUR",
            )
        o = found[0]
        return Price(
            gpu=name,
            usd_per_gpu_hour=o.usd_per_gpu_hour,
            pricing=o.pricing,
            provider=o.provider,
            product=o.product,
            source=o.source,
            read_on=o.read_on,
            via=o.via,
            note=o.note,
        )


def catalog_rows(pricing: str | None = None) -> list[Offer]:
    """Every offer (optionally of one pricing model), in catalog GPU order then price."""
    order = {g.name: i for i, g in enumerate(gpus())}
    rows = [o for o in offers() if pricing is None or o.pricing == pricing]
    return sorted(rows, key=lambda o: (order.get(o.gpu, 99), o.pricing, o.usd_per_gpu_hour))
