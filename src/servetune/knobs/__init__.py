"""The knob registry: every engine knob servetune reads, renders or tunes, written once.

Each knob has an engine-neutral name (vLLM's: ``max_num_seqs``, ``enable_chunked_prefill``),
a type and range, each engine's spelling by engine version — or the reason the engine has
none — its defaults, where a tuner looks, and what the memory planner does with it
(:mod:`servetune.knobs.table`). A configuration is a plain dict of knob → value.

    tunable("vllm")                                   # knobs + search ranges for a tuner
    render_command("vllm", MODEL, {"max_num_seqs": 128}).shell()   # "vllm serve MODEL …"
    parse_command("vllm serve MODEL --max-num-seqs 128").values    # {"max_num_seqs": 128}
    diff(old, new)                                    # [Change("max_num_seqs", 128, 256)]
    flag("llama.cpp", "max_num_seqs")                 # "-np"
    require("tgi", "enable_chunked_prefill")          # ConfigError naming tgi (knob.absent)

Sits low in the layers: it imports only :mod:`servetune.errors`.
"""

from servetune.knobs.defaults import vllm_batch_defaults
from servetune.knobs.model import (
    Absent,
    Default,
    DefaultContext,
    Knob,
    KnobValue,
    SearchRange,
    Spelling,
    parse_version,
    value_text,
)
from servetune.knobs.parse import ParsedCommand, parse_command
from servetune.knobs.registry import (
    KNOB_NAMES,
    Tunable,
    check_config,
    check_engine,
    check_value,
    check_values,
    conflicts,
    default,
    default_rule,
    engine_knobs,
    flag,
    has,
    knob,
    note,
    require,
    spelling,
    tunable,
)
from servetune.knobs.render import (
    Change,
    Command,
    Rendered,
    diff,
    render_args,
    render_change,
    render_command,
    render_value,
    side_file_text,
    side_options,
)
from servetune.knobs.table import ENGINES, KNOBS

__all__ = [
    "ENGINES",
    "KNOBS",
    "KNOB_NAMES",
    "Absent",
    "Change",
    "Command",
    "Default",
    "DefaultContext",
    "Knob",
    "KnobValue",
    "ParsedCommand",
    "Rendered",
    "SearchRange",
    "Spelling",
    "Tunable",
    "check_config",
    "check_engine",
    "check_value",
    "check_values",
    "conflicts",
    "default",
    "default_rule",
    "diff",
    "engine_knobs",
    "flag",
    "has",
    "knob",
    "note",
    "parse_command",
    "parse_version",
    "render_args",
    "render_change",
    "render_command",
    "render_value",
    "require",
    "side_file_text",
    "side_options",
    "spelling",
    "tunable",
    "value_text",
    "vllm_batch_defaults",
]
