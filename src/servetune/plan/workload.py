"""The traffic a plan must hold: request lengths (drawn once) and arrivals at any rate.

Lengths come from the random dataset (``--input-len``/``--output-len``/``--range-ratio``), a
dataset file (ShareGPT JSON or JSONL, as ``bench`` reads them) or a measured run (each
successful request's prompt and output tokens, ``--from-run``). Arrivals are Poisson (or gamma
with ``burstiness``) drawn once at 1 req/s from the seed and scaled by 1/rate, so every
candidate sees the same requests in the same order, only faster or slower.

One draw is one sample of the traffic: the P99 of 1,000 Poisson requests near a replica's
capacity differs from draw to draw by tens of %. :meth:`Workload.redrawn` gives independent
draws of the same traffic (other arrivals, the requests in another order) to check a figure
found on the first one.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from servetune.errors import ConfigError, ServetuneError
from servetune.results.io import detect_dir, read_records, read_run_result
from servetune.results.schema import BenchConfig
from servetune.workload.arrivals import arrival_offsets
from servetune.workload.spec import RequestSpec


class Workload(BaseModel):
    """Requests in send order, their offsets at 1 req/s, and where they came from."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    specs: list[RequestSpec]
    unit_offsets: list[float]
    """Send offsets (s) at a rate of 1 req/s; divide by the rate."""
    source: str
    burstiness: float = 1.0
    seed: int = 0
    """The seed the arrivals were drawn from (redraws derive theirs from it)."""

    @property
    def mean_input(self) -> float:
        return float(np.mean([s.input_len for s in self.specs]))

    @property
    def mean_output(self) -> float:
        return float(np.mean([s.output_len for s in self.specs]))

    @property
    def max_request(self) -> int:
        return max(s.input_len + s.output_len for s in self.specs)

    def redrawn(self, draw: int) -> Workload:
        """Draw number ``draw`` of the same traffic, independent of this one (0: this one):
        other Poisson/gamma arrivals and the requests in another order — the first ``n`` of a
        pool larger than ``n`` are other requests, not only reordered. Deterministic in
        (seed, draw)."""
        if draw == 0:
            return self
        state = np.random.SeedSequence([self.seed, draw, 0x51AB]).generate_state(2)
        order = np.random.default_rng(int(state[0])).permutation(len(self.specs))
        return Workload.model_construct(
            specs=[self.specs[i] for i in order],
            unit_offsets=_offsets(len(self.specs), int(state[1]), self.burstiness),
            source=self.source,
            burstiness=self.burstiness,
            seed=self.seed,
        )


def _offsets(n: int, seed: int, burstiness: float) -> list[float]:
    kind = "poisson" if burstiness == 1.0 else "gamma"
    return [float(x) for x in arrival_offsets(kind, 1.0, n, seed, burstiness)]  # type: ignore[arg-type]


def synthetic(
    input_len: int, output_len: int, range_ratio: float, n: int, seed: int, burstiness: float
) -> Workload:
    if input_len < 1 or output_len < 1:
        raise ConfigError.over_fields(
            f"{{input_len}} and {{output_len}} must be ≥ 1 (got {input_len} and {output_len})",
            hint="e.g. {input_len}=1024 {output_len}=128",
        )
    if not 0 <= range_ratio < 1:
        raise ConfigError.over_fields(
            f"{{range_ratio}} must be in [0, 1) (got {range_ratio})",
            hint="e.g. {range_ratio}=0.5 (lengths L·0.5 to L·1.5), 0 for fixed lengths",
        )
    rng = np.random.default_rng(seed)

    def draw(mean: int) -> np.ndarray:
        lo, hi = max(1, int(mean * (1 - range_ratio))), max(1, int(mean * (1 + range_ratio)))
        return rng.integers(lo, hi + 1, n)

    ins, outs = draw(input_len), draw(output_len)
    specs = [
        RequestSpec(input_len=int(a), output_len=int(b)) for a, b in zip(ins, outs, strict=True)
    ]
    spread = f" ±{range_ratio:.0%}" if range_ratio else ""
    return Workload(
        specs=specs,
        unit_offsets=_offsets(n, seed, burstiness),
        source=f"random lengths: {input_len}{spread} in, {output_len}{spread} out",
        burstiness=burstiness,
        seed=seed,
    )


def from_dataset(
    path: str, tokenizer: str | None, output_len: int | None, n: int, seed: int, burstiness: float
) -> Workload:
    from servetune.workload.datasets import build_dataset
    from servetune.workload.tokens import load_tokenizer

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"dataset {p} not found", hint="give a ShareGPT .json or a .jsonl file")
    name = "jsonl" if p.suffix == ".jsonl" else "sharegpt"
    cfg = BenchConfig(
        dataset_name=name,  # type: ignore[arg-type]
        dataset_path=str(p),
        sharegpt_output_len=output_len,
        tokenizer=tokenizer,
        num_prompts=n,
        seed=seed,
    )
    specs = build_dataset(cfg, load_tokenizer(tokenizer), n)
    return Workload(
        specs=specs,
        unit_offsets=_offsets(len(specs), seed, burstiness),
        source=f"{name} dataset {p}",
        burstiness=burstiness,
        seed=seed,
    )


def from_run(path: str, n: int, seed: int, burstiness: float) -> tuple[Workload, BenchConfig]:
    """The lengths of a run's requests: as served for the successful ones (prompt and output
    tokens), as planned for the failed ones — they are part of the traffic to hold (a run that
    lost its longest prompts to ``--max-model-len`` would otherwise be planned without them)."""
    p = Path(path).expanduser()
    try:
        if detect_dir(p) != "run":
            raise ConfigError.over_fields(
                f"{{from_run}} {p} is a sweep", hint="give one of its levels: SWEEP/levels/<label>"
            )
        run = read_run_result(p)
        records = read_records(p)
    except ServetuneError as exc:
        if exc.templates is not None:  # already over fields (the sweep refusal above)
            raise
        raise ConfigError.over_fields("{from_run}: " + exc.message, hint=exc.hint) from None
    pairs: list[tuple[int, int]] = []
    served = lost = 0
    for r in records:  # in the run's order: the first n stand for the whole run
        if r.ok:
            a, b = r.prompt_tokens or r.planned_input_len, r.output_tokens or r.planned_output_len
        elif r.status == "failed":
            a, b = r.planned_input_len, r.planned_output_len
        else:
            continue
        if a and b:
            pairs.append((a, b))
            served, lost = served + int(r.ok), lost + int(not r.ok)
    if not served:
        raise ConfigError.over_fields(
            f"{{from_run}} {p}: no successful request to take lengths from"
        )
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), n) if len(pairs) < n else np.arange(n)
    specs = [RequestSpec(input_len=int(pairs[i][0]), output_len=int(pairs[i][1])) for i in picks]
    return (
        Workload(
            specs=specs,
            unit_offsets=_offsets(len(specs), seed, burstiness),
            source=f"request lengths of the run {p} ({served} successful requests"
            + (f" and {lost} failed ones, at their planned lengths)" if lost else ")"),
            burstiness=burstiness,
            seed=seed,
        ),
        run.config,
    )


def offsets_at(w: Workload, rate: float, n: int) -> list[int]:
    """Send offsets (ns) of the first ``n`` requests at ``rate`` req/s (all 0 for inf)."""
    if math.isinf(rate):
        return [0] * n
    return [int(x / rate * 1e9) for x in w.unit_offsets[:n]]
