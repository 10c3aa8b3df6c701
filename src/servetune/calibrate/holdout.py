"""Which runs a calibration holds out, and the run-to-run noise its repeats show.

``auto``: the runs are grouped by what the simulator is asked about — the engine's knobs and
the length mix (mean prompt and output tokens, to 10%). The largest group is the fit's; every
other group is held out whole (another ``--max-num-seqs``, another mix: questions the profile
must answer without having seen them), and within the fit's group one interior level (the
middle one by load) is held out too, when the group has three or more. A run that repeats
another (same group, same concurrency cap, offered rate within 5%) is held out as a
repeat, and the pair gives the noise. ``none`` holds nothing out; a list of labels holds
out exactly those.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servetune.calibrate.evidence import RunEvidence
from servetune.calibrate.identify import Identified
from servetune.calibrate.replay import rel_error
from servetune.errors import ConfigError
from servetune.results.calibration_file import FIGURES


@dataclass
class Used:
    """A run that informs the calibration."""

    ev: RunEvidence
    it: Identified
    measured: dict[str, float | None]
    concurrency: float
    rate: float

    @property
    def mix(self) -> tuple[float, float]:
        recs = self.ev.ok_records
        n = max(1, len(recs))
        inp = sum(r.prompt_tokens or r.planned_input_len for r in recs) / n
        out = sum(r.output_tokens or 0 for r in recs) / n
        return inp, out

    @property
    def offered(self) -> float:
        rate = self.ev.run.config.request_rate
        return float(rate) if math.isfinite(rate) else math.inf

    @property
    def cap(self) -> int | None:
        """The client's concurrency cap (a closed-loop level)."""
        return self.ev.run.config.max_concurrency


def _knobs(u: Used) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in u.it.config.knob_values().items()))


def _near(a: float, b: float, tol: float = 0.10) -> bool:
    return abs(a - b) <= tol * max(a, b, 1.0)


def _same_group(a: Used, b: Used) -> bool:
    """The same question to the simulator: equal knobs, mean lengths within 10%."""
    (ia, oa), (ib, ob) = a.mix, b.mix
    return _knobs(a) == _knobs(b) and _near(ia, ib) and _near(oa, ob)


def _same_rate(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return math.isinf(a) and math.isinf(b)
    return abs(a - b) <= 0.05 * max(a, b)


def split(
    used: Sequence[Used], holdout: str
) -> tuple[list[int], list[int], str, dict[str, float | None]]:
    """(fit indices, held-out indices, how, noise per figure)."""
    n = len(used)
    groups: list[list[int]] = []
    for i, u in enumerate(used):
        home = next((g for g in groups if _same_group(used[g[0]], u)), None)
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    repeats: list[tuple[int, int]] = []
    for members in groups:
        for j, a in enumerate(members):
            for b in members[j + 1 :]:
                ua, ub = used[a], used[b]
                if (
                    ua.cap == ub.cap
                    and _same_rate(ua.offered, ub.offered)
                    and all(b != y for _, y in repeats)
                ):
                    repeats.append((a, b))
                    break
    noise = _noise(used, repeats)
    if holdout == "none":
        return list(range(n)), [], "nothing held out (--hold-out none)", noise
    if holdout != "auto":
        labels = {s.strip() for s in holdout.split(",") if s.strip()}
        known = {u.ev.label for u in used}
        missing = sorted(labels - known)
        if missing:
            raise ConfigError.over_fields(
                f"{{hold_out}} names runs that are not among the evidence: {', '.join(missing)}",
                hint=f"the runs are: {', '.join(sorted(known))}",
                code="calibrate.bad_input",
            )
        asked = [i for i, u in enumerate(used) if u.ev.label in labels]
        rest_fit = [i for i in range(n) if i not in asked]
        if not rest_fit:
            raise ConfigError.over_fields(
                "{hold_out} holds out every run: nothing is left to fit on",
                hint="hold out fewer runs",
                code="calibrate.bad_input",
            )
        return rest_fit, asked, "held out as asked: " + ", ".join(sorted(labels)), noise
    main = max(groups, key=len)
    held: list[int] = [i for i in range(n) if i not in main]
    why: list[str] = []
    if held:
        why.append(
            f"{len(held)} run(s) of other knobs or another length mix ("
            + ", ".join(used[i].ev.label for i in held)
            + ")"
        )
    repeat_of = {b for _, b in repeats if b in main}
    for b in sorted(repeat_of):
        held.append(b)
        why.append(f"{used[b].ev.label} (a repeat)")
    rest = [i for i in main if i not in repeat_of]
    if len(rest) >= 3:
        by_load = sorted(rest, key=lambda i: used[i].concurrency)
        mid = by_load[len(by_load) // 2]
        held.append(mid)
        why.append(f"{used[mid].ev.label} (an interior level of the fit's sweep)")
    fit = [i for i in range(n) if i not in held]
    how = "held out: " + "; ".join(why) if why else "nothing held out (too few runs to spare one)"
    return fit, sorted(held), how, noise


def _noise(used: Sequence[Used], repeats: list[tuple[int, int]]) -> dict[str, float | None]:
    """Median relative difference between repeats, per figure (None without repeats)."""
    out: dict[str, float | None] = {}
    for f in FIGURES:
        diffs = []
        for a, b in repeats:
            ma, mb = used[a].measured.get(f), used[b].measured.get(f)
            e = rel_error(ma, mb)
            if e is not None:
                diffs.append(abs(e))
        out[f] = sorted(diffs)[len(diffs) // 2] if diffs else None
    return out
