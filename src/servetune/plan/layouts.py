"""Why a layout won: the winner against the best candidate of every other layout on its GPU
type, figure for figure, and the best row of every other GPU type (:func:`layout_notes`).

The figures are the plan's own (the SLO-max rate per replica, the engine's KV pool, the
requests running at the SLO, the saturated TPOT, $/hour); the reason given is the figure that
differs most, in the terms of the model: a KV pool several times larger under data-parallel
attention is MLA's latent (one per token, copied on every tensor-parallel rank, held once per
request by a data-parallel rank) or the KV heads' split; faster steps are expert parallelism's
whole experts or the all-reduces it saves."""

from __future__ import annotations

from servetune.arch.architecture import Architecture
from servetune.arch.models import find_model
from servetune.errors import ServetuneError
from servetune.results.plan_file import PlannedCandidate, PlanResult


def layout_of(c: PlannedCandidate) -> str:
    parts = [f"tp{c.tensor_parallel_size}"] if c.tensor_parallel_size > 1 else []
    if c.data_parallel_size > 1:
        parts.append(f"dp{c.data_parallel_size}")
    elif not parts:
        parts.append("tp1")
    if c.enable_expert_parallel:
        parts.append("ep")
    return "-".join(parts)


def _per_gpu(c: PlannedCandidate) -> float:
    return (c.slo_max_rate_per_replica or 0.0) / c.gpus_per_replica


def _kv_per_gpu(c: PlannedCandidate) -> float | None:
    return c.engine_kv_tokens / c.gpus_per_replica if c.engine_kv_tokens else None


def _sat_per_gpu(c: PlannedCandidate) -> float | None:
    sat = c.saturation
    return sat.request_throughput / c.gpus_per_replica if sat is not None else None


def _why(w: PlannedCandidate, o: PlannedCandidate, arch: Architecture | None) -> str:
    """What decides between the winner and ``o``: the traffic each GPU holds at the SLO, and
    the figure behind it."""
    a, b = _per_gpu(w), _per_gpu(o)
    same_cost = w.usd_per_hour == o.usd_per_hour
    if b > 0 and a / b < 1.05:
        if same_cost:
            return (
                f"a tie: the same $/hour and about as much per GPU ({a:.3g} vs {b:.3g} req/s, "
                "within the search's tolerance), ranked ahead on headroom"
            )
        return (
            f"about as much per GPU ({a:.3g} vs {b:.3g} req/s), but {w.replicas} x "
            f"{w.gpus_per_replica} GPUs fit the peak where {o.replicas} x "
            f"{o.gpus_per_replica} take {o.gpus_total}"
        )
    out = ("the same $/hour, more headroom: " if same_cost else "") + (
        f"each GPU holds {a:.3g} req/s at the SLO against {b:.3g}"
    )
    kw, ko = _kv_per_gpu(w), _kv_per_gpu(o)
    sw, so = _sat_per_gpu(w), _sat_per_gpu(o)
    o_at = o.at_slo
    kv_bound = o_at is not None and (
        (o_at.kv_cache_usage_mean or 0.0) >= KV_BOUND or o_at.preemptions > 0
    )
    if kw and ko and kw / ko >= 1.5 and kv_bound:
        if arch is not None and arch.mla is not None and w.data_parallel_size > 1:
            how = (
                "MLA keeps one latent per token, which every tensor-parallel rank holds whole, "
                "while a data-parallel rank holds only its own requests'"
            )
        elif w.data_parallel_size > o.data_parallel_size:
            how = "each data-parallel rank holds only its own requests' KV"
        else:
            how = "its weights leave more of each GPU to the KV cache"
        out += f": {kw / ko:.1f}x the KV pool per GPU ({how})"
    elif sw and so and sw / so >= 1.05:
        how = ""
        if w.data_parallel_size > o.data_parallel_size and w.gpus_per_replica == o.gpus_per_replica:
            how = (
                ": data-parallel attention runs each GPU's own requests' attention whole, with "
                "no all-reduce per layer; the MoE layers' dispatch and combine cost less"
            )
        elif w.gpus_per_replica < o.gpus_per_replica:
            how = (
                f": {o.gpus_per_replica} GPUs split each step but add its collectives (an "
                "all-reduce per layer, or a dispatch and combine per MoE layer)"
            )
        elif w.enable_expert_parallel and not o.enable_expert_parallel:
            how = ": whole experts per GPU, no all-reduce per layer"
        out += f" (saturated {sw:.3g} vs {so:.3g} req/s per GPU{how})"
    return out


def _figures(c: PlannedCandidate) -> str:
    kv = f"{c.engine_kv_tokens / 1e3:,.0f}k-token KV pool" if c.engine_kv_tokens else "KV pool ?"
    rate = c.slo_max_rate_per_replica or 0.0
    return (
        f"{c.replicas} x {c.gpus_per_replica} GPUs at {rate:.3g} req/s a replica "
        f"({(c.limiting_metric or '?').upper()}-bound), {kv}, "
        f"{c.concurrency_at_slo or 0:.0f} running, ${c.usd_per_hour or 0:,.2f}/hour"
    )


KV_BOUND = 0.5
"""A KV pool explains a lead only where the other candidate used at least half of its own at
the SLO (or preempted): below that the pool was not what held it back."""
ALTERNATIVES = 3
"""Other layouts of the winner's GPU type compared in the note (the best-ranked ones)."""


def layout_notes(result: PlanResult, winner: PlannedCandidate) -> list[str]:
    """Notes on why the winner's layout and GPU won (empty when nothing else held the
    traffic)."""
    try:
        arch: Architecture | None = find_model(result.model)
    except ServetuneError:
        arch = None
    ok = [c for c in result.candidates if c.status == "ok" and c is not winner]
    notes: list[str] = []
    mine = layout_of(winner)
    seen: set[str] = set()
    lines = []
    for c in ok:  # ranking order: the first of each layout is its best
        lay = layout_of(c)
        if c.gpu != winner.gpu or lay == mine or lay in seen:
            continue
        seen.add(lay)
        lines.append(f"{lay}: {_figures(c)}; {mine} wins: {_why(winner, c, arch)}")
        if len(lines) == ALTERNATIVES:
            break
    if lines:
        notes.append(f"why {mine} on {winner.gpu}: {_figures(winner)}. Against " + ". ".join(lines))
    others = []
    gpus_seen = {winner.gpu}
    for c in ok:
        if c.gpu in gpus_seen:
            continue
        gpus_seen.add(c.gpu)
        others.append(
            f"{c.gpu} {layout_of(c)} ${c.usd_per_hour or 0:,.2f}/hour ({c.replicas} x "
            f"{c.gpus_per_replica} GPUs at ${c.usd_per_gpu_hour or 0:g}/GPU-hour)"
        )
    refused = sorted(
        {c.gpu for c in result.candidates if c.gpu not in gpus_seen and c.status != "ok"}
    )
    if others or refused:
        text = "best of the other GPUs: " + ("; ".join(others) if others else "none holds it")
        for gpu in refused:
            why = next((c.reason for c in result.candidates if c.gpu == gpu and c.reason), "no row")
            text += f"; {gpu}: none holds it ({why[:160]})"
        notes.append(text)
    return notes
