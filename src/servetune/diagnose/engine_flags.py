"""The per-engine spelling of a knob change: the exact flag and value each engine takes, vLLM
first, or why the engine has no equivalent (the knob registry's spelling)."""

from __future__ import annotations

from servetune.knobs import KnobValue, has, note, render_value
from servetune.knobs import flag as knob_flag

ENGINES = ("vllm", "sglang", "tgi", "llama.cpp")


def _value_for(engine: str, knob: str, value: KnobValue | None) -> str | None:
    """The flag and value ENGINE takes for KNOB = value (the registry's spelling), the flag
    alone when the value is unknown, or None when the engine has no such knob."""
    if not has(engine, knob):
        return None
    if value is None:
        return knob_flag(engine, knob)
    if knob == "enable_chunked_prefill" and engine == "sglang" and value:
        return "--chunked-prefill-size 8192"
    return render_value(engine, knob, value) or None


def engine_flags(knob: str, old: KnobValue | None, new: KnobValue | None) -> dict[str, str]:
    """engine → the exact change, vLLM first (None values: the flag to change, no number)."""
    out: dict[str, str] = {}
    for engine in ENGINES:
        spelled = _value_for(engine, knob, new)
        why = note(engine, knob)
        if spelled is None:
            out[engine] = f"no equivalent{f': {why}' if why else ''}"
            continue
        text = spelled
        if new is None:
            text = f"{spelled} (current value unknown)"
        elif old is not None and engine == "vllm":
            was = _value_for(engine, knob, old)
            if was and was != spelled:
                text = f"{spelled}  (was {was})"
        if why and engine != "vllm":
            text += f"  [{why}]"
        out[engine] = text
    return out
