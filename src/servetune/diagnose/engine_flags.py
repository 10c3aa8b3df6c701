"""The per-engine spelling of a knob change: the exact flag and value each engine takes, vLLM
first, or why the engine has no equivalent (the knob registry's spelling). The engines are
those whose profile asks for it (``diagnose_flags``)."""

from __future__ import annotations

from collections.abc import Mapping

from servetune.knobs import KnobValue, has, note, render_change
from servetune.knobs import flag as knob_flag
from servetune.profiles import NEUTRAL, PROFILES

ENGINES = tuple(p.id for p in PROFILES if p.diagnose_flags)


def _value_for(
    engine: str, knob: str, value: KnobValue | None, also: Mapping[str, object] | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """The flag and value ENGINE takes for KNOB = value (the registry's spelling), the flag
    alone when the value is unknown, or None when the engine has no such knob; and the knobs
    of ALSO that spelling already carries."""
    if not has(engine, knob):
        return None, ()
    if value is None:
        return knob_flag(engine, knob), ()
    text, carried = render_change(engine, knob, value, also)
    return text or None, carried


def engine_flags(
    knob: str,
    old: KnobValue | None,
    new: KnobValue | None,
    also: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """engine → the exact change, vLLM first (None values: the flag to change, no number)."""
    return {e: text for e, (text, _) in engine_changes(knob, old, new, also).items()}


def engine_changes(
    knob: str,
    old: KnobValue | None,
    new: KnobValue | None,
    also: Mapping[str, object] | None = None,
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """engine → (the exact change, the knobs of ALSO it already carries)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for engine in ENGINES:
        spelled, carried = _value_for(engine, knob, new, also)
        why = note(engine, knob)
        if spelled is None:
            out[engine] = (f"no equivalent{f': {why}' if why else ''}", ())
            continue
        text = spelled
        if new is None:
            text = f"{spelled} (current value unknown)"
        elif old is not None and engine == NEUTRAL:
            was, _ = _value_for(engine, knob, old)
            if was and was != spelled:
                text = f"{spelled}  (was {was})"
        if why and engine != NEUTRAL:
            text += f"  [{why}]"
        out[engine] = (text, carried)
    return out
