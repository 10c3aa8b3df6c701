"""Knobs spelled as keys of one JSON flag (vLLM's --speculative-config): rendered as one
object, read back key by key, other keys listed as ignored, a bad object refused."""

from __future__ import annotations

import json

import pytest

from servetune.errors import ConfigError
from servetune.knobs import parse_command, render_command, render_value


def test_the_knobs_of_one_json_flag_render_as_one_object() -> None:
    cmd = render_command(
        "vllm",
        "deepseek-ai/DeepSeek-R1",
        {"speculative_method": "mtp", "num_speculative_tokens": 2, "max_num_seqs": 64},
    )
    argv = cmd.argv
    assert argv.count("--speculative-config") == 1
    obj = json.loads(argv[argv.index("--speculative-config") + 1])
    assert obj == {"method": "mtp", "num_speculative_tokens": 2}
    back = parse_command(cmd.shell())
    assert back.values == {
        "max_num_seqs": 64,
        "speculative_method": "mtp",
        "num_speculative_tokens": 2,
    }
    assert render_value("vllm", "num_speculative_tokens", 3) == (
        '--speculative-config {"num_speculative_tokens": 3}'
    )


def test_keys_that_are_no_knob_are_ignored_and_said() -> None:
    line = (
        "vllm serve m --speculative_config="
        '\'{"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}\''
    )
    got = parse_command(line)
    assert got.values == {"speculative_method": "eagle3", "num_speculative_tokens": 3}
    assert any("model" in x for x in got.ignored)


@pytest.mark.parametrize("bad", ["mtp", "[1, 2]", "{not json"])
def test_a_flag_that_is_not_a_json_object_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="not a JSON object"):
        parse_command(["vllm", "serve", "m", "--speculative-config", bad])


def test_values_are_checked() -> None:
    with pytest.raises(ConfigError):
        parse_command(["vllm", "serve", "m", "-sc", '{"num_speculative_tokens": 0}'])
