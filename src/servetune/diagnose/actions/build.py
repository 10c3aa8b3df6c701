"""One action for one run: the table's spec (:data:`servetune.diagnose.actions.table.ACTIONS`)
filled with the run's figures — its move, the memory planner's before/after KV pool, each engine's
flags, the rendered title, expectation and risk; and applying an action to an engine config.
"""

from __future__ import annotations

import re
from typing import Any

from servetune.diagnose.actions.table import ACTIONS
from servetune.diagnose.actions.targets import what_if_pool
from servetune.diagnose.conditions import fmt_num, fmt_value, render
from servetune.diagnose.engine_flags import engine_changes, engine_flags
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.model import Action
from servetune.knobs import KnobValue, has, render_value, value_text
from servetune.knobs import flag as knob_flag
from servetune.profiles import NEUTRAL
from servetune.sim.config import EngineConfig


def build_action(spec_id: str, fig: Figures, extra: dict[str, Any] | None = None) -> Action | None:
    """The action for this run, or None when it does not apply (e.g. already quantized)."""
    spec = ACTIONS[spec_id]
    old: KnobValue | None = None
    new: KnobValue | None = None
    if spec.target is not None:
        got = spec.target(fig)
        if got is None:
            return None
        old, new = got
    values: dict[str, Any] = dict(extra or {})
    values["flag"] = (knob_flag(NEUTRAL, spec.knob) or "") if spec.knob else ""
    values["old"] = "?" if old is None else value_text(old)
    if new is None:
        values["new"] = "2× the current value" if spec.knob else "?"
    else:
        values["new"] = value_text(new)
    if spec.id == "raise_max_num_seqs" and new is None:
        values["new"] = "2× the current cap"
    pool_note = "planner figures need the GPU and the model"
    if spec.knob is not None and new is not None:
        change = what_if_pool(fig.config, spec.knob, new)
        if isinstance(change, tuple):
            a, b = change
            pct = (b - a) / a if a else 0.0
            pool_note = f"KV pool {fmt_num(a)} → {fmt_num(b)} tokens, {pct:+.0%}"
        elif isinstance(change, str):
            pool_note = change
    also = spec.also(fig) if spec.also is not None else {}
    values["also_flags"] = "".join(
        f" {render_value(NEUTRAL, k, v)}" for k, v in also.items() if has(NEUTRAL, k)
    )
    values["pool_change"] = pool_note
    values["quant_effect"] = _quant_effect(new)
    extra = _as_extra(values)
    title = render(spec.title, fig, extra) or spec.title.split("{")[0].strip()
    expected = _render_optional(spec.expected, fig, extra)
    risk = _render_optional(spec.risk, fig, extra)
    changes = engine_changes(spec.knob, old, new, also) if spec.knob else {}
    flags = {engine: text for engine, (text, _) in changes.items()}
    for k, v in also.items():
        for engine, text in engine_flags(k, fig.get(k), v).items():
            main = flags.get(engine, "")
            carried = k in changes.get(engine, ("", ()))[1]
            if carried:
                # the main change's spelling already carries this value (SGLang's chunk size
                # is the per-step prefill budget itself): the change alone says it
                flags[engine] = main.split("  [")[0]
                continue
            if main and not main.startswith("no equivalent") and not text.startswith("no "):
                flags[engine] += f" + {text}"
    return Action(
        id=spec.id,
        title=title,
        knob=spec.knob,
        from_value=old,
        to_value=new,
        also=also,
        flags=flags,
        expected=expected,
        risk=risk,
        cost_step=spec.cost_step,
        verify=spec.verify,
    )


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]")


def _render_optional(template: str, fig: Figures, extra: dict[str, Any]) -> str:
    """Render; parts in [[…]] are dropped when a figure they name is missing."""

    def part(m: re.Match[str]) -> str:
        return render(m.group(1), fig, extra) or ""

    filled = _OPTIONAL.sub(part, template)
    return render(filled, fig, extra) or filled


def _quant_effect(new: KnobValue | None) -> str:
    if new is None:
        return "quantized weights take less memory"
    if new == "fp8":
        return (
            "fp8 weights take half the memory and run the matmuls on fp8 tensor cores (up to "
            "~2× the compute of bf16)"
        )
    return (
        "int4 weights (AWQ/GPTQ) take about a quarter of the memory and speed up memory-bound "
        "decode; compute-bound prefill does not get faster on a GPU without fp8 tensor cores"
    )


def _as_extra(values: dict[str, Any]) -> dict[str, Any]:
    # Plain strings and numbers: render() formats numbers by spec, strings as they are.
    return {k: (fmt_value(v, "num") if isinstance(v, float) else v) for k, v in values.items()}


def apply_action(cfg: EngineConfig, action: Action) -> EngineConfig:
    """``cfg`` with the action's knob set to its new value (for re-running a scenario)."""
    if action.knob is None or action.to_value is None:
        raise ValueError(f"action {action.id} changes no knob to a known value")
    changes = {action.knob: action.to_value}
    changes.update(action.also)
    return EngineConfig.model_validate({**cfg.model_dump(), **changes})
