"""A configuration as an engine's command line: the flags (and environment variables) that
set each knob, spelled as the engine at a given version reads them.

    render_command("vllm", "Qwen/Qwen2.5-7B-Instruct", {"max_num_seqs": 128})
    → Command(argv=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "128"])

Knobs left unset (None) are not rendered: the engine applies its default. A knob the engine
lacks is a ConfigError naming the engine (``knob.absent``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from servetune.errors import ConfigError
from servetune.knobs.model import KnobValue, Spelling, value_text
from servetune.knobs.registry import KNOB_NAMES, Version, check_values, flag, knob, require
from servetune.profiles import profile

SIDE_FILE_NAME = "llm_api_options.yaml"
"""The side file's name in a command shown to a person (the launcher writes its own)."""


@dataclass
class Rendered:
    """Flags, environment variables and side-file options (dotted key → value) that set a
    configuration."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    side: dict[str, object] = field(default_factory=dict)


def side_file_text(options: Mapping[str, object]) -> str:
    """OPTIONS (dotted keys) as the YAML an engine's side file holds, nested."""
    tree: dict[str, object] = {}
    for dotted, value in options.items():
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            assert isinstance(child, dict), dotted
            node = child
        node[leaf] = value
    return str(yaml.safe_dump(tree, sort_keys=False, default_flow_style=False))


def side_options(engine: str, rendered: Rendered) -> dict[str, object]:
    """The side file of ENGINE for RENDERED: the profile's standing options, then the knobs'
    (empty when the engine reads no side file)."""
    launch = profile(engine).launch
    if launch.side_file_flag is None:
        return {}
    return {**dict(launch.side_file_always), **rendered.side}


@dataclass
class Command:
    """A whole command line: environment assignments, then argv; ``files`` are written
    before it runs (a YAML side file: name → text)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """The command as shell text: a here-document for each file, then the line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.argv)
        line = f"{env} {cmd}" if env else cmd
        heredocs = "".join(
            f"cat > {shlex.quote(name)} <<'EOF'\n{text}EOF\n" for name, text in self.files.items()
        )
        return heredocs + line


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
    if s.yaml:
        word: object = value
        if isinstance(value, str):
            word = _word(engine, name, s, value)
        out.side[s.yaml] = word
        return out
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
    elif style == "json_key":
        out.args = [s.flag, json.dumps({s.key: _json_value(engine, name, s, value)})]
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


def _side_word(value: object) -> str:
    """A side-file value as YAML spells it (``true``, ``fp8``)."""
    text = str(yaml.safe_dump(value, default_flow_style=True))
    return text.strip().removesuffix("...").strip()


def _items(value: KnobValue) -> list[int]:
    """An ``int_list`` knob's items (the registry checked the value's type)."""
    assert isinstance(value, list), value
    return value


def _whole(value: KnobValue) -> int:
    """An ``int`` knob's value (the registry checked its type)."""
    assert isinstance(value, int), value
    return value


def _json_value(engine: str, name: str, s: Spelling, value: KnobValue) -> KnobValue:
    """A ``json_key`` knob's value in the engine's JSON object (its word for a choice)."""
    if isinstance(value, bool | int | float | list):
        return value
    return _word(engine, name, s, value)


def render_args(engine: str, values: Mapping[str, object], version: Version = None) -> Rendered:
    """The flags and environment that set VALUES on ENGINE (unset knobs: not rendered). Knobs
    spelled as keys of one JSON flag are rendered together, as one object, where the first of
    them is."""
    cfg = check_values(values)
    out = Rendered()
    objects: dict[str, dict[str, KnobValue]] = {}
    for name in KNOB_NAMES:
        if name not in cfg:
            continue
        s = require(engine, name, version)
        if s.style == "json_key":
            if s.flag not in objects:
                objects[s.flag] = {}
                out.args += [s.flag, ""]  # the object, filled in below
            objects[s.flag][s.key] = _json_value(engine, name, s, cfg[name])
            continue
        part = _spell(engine, name, s, cfg[name], cfg)
        out.args += part.args
        out.env.update(part.env)
        out.side.update(part.side)
    for flag_name, obj in objects.items():
        at = out.args.index(flag_name)
        out.args[at + 1] = json.dumps(obj, separators=(", ", ": "))
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
    side = " ".join(f"{key}: {_side_word(v)}" for key, v in part.side.items())
    if side:
        side += f" (in {profile(engine).launch.side_file_flag})"
    return " ".join(x for x in (envs, text, side) if x)


def render_change(
    engine: str,
    name: str,
    value: object,
    also: Mapping[str, object] | None = None,
    version: Version = None,
) -> tuple[str, tuple[str, ...]]:
    """A change of knob NAME to VALUE as a person makes it on ENGINE, and the knobs of ALSO
    (set in the same change) whose value it already carries: ``render_value``, except that a
    feature on by default whose launch renders nothing is turned on with the spelling's
    ``turn_on`` word (SGLang: ``--chunked-prefill-size 8192``, or the step budget given)."""
    k = knob(name)
    s = require(engine, k.name, version)
    if s.style == "off_value" and value is True and s.turn_on:
        given = (also or {}).get(s.turn_on_from) if s.turn_on_from else None
        if given is not None:
            return f"{s.flag} {_fmt(check_values({s.turn_on_from: given})[s.turn_on_from])}", (
                s.turn_on_from,
            )
        return f"{s.flag} {s.turn_on}", ()
    return render_value(engine, k.name, value, version), ()


def render_command(
    engine: str,
    model: str,
    values: Mapping[str, object],
    version: Version = None,
    extra: list[str] | None = None,
) -> Command:
    """The command that serves MODEL on ENGINE with VALUES (``vllm serve MODEL …``), as the
    engine's own argument parser reads it (its entry from the engine's profile)."""
    entry = profile(engine).entry
    argv = [*entry.command, *([entry.model_flag, model] if entry.model_flag else [model])]
    part = render_args(engine, values, version)
    files: dict[str, str] = {}
    side = side_options(engine, part)
    if side:
        files[SIDE_FILE_NAME] = side_file_text(side)
        flag_name = profile(engine).launch.side_file_flag
        assert flag_name is not None
        part.args += [flag_name, SIDE_FILE_NAME]
    return Command(argv=[*argv, *part.args, *(extra or [])], env=part.env, files=files)


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
