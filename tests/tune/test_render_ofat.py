"""The one-knob table on the terminal: a switch is turned on or off (no "up"/"down"), and the
columns stay in line whatever the knob's name."""

from __future__ import annotations

from servetune.results.tune_file import OfatRow
from servetune.tune.render import ofat_label


def test_a_switch_has_no_direction_and_a_number_has_one() -> None:
    assert ofat_label(OfatRow(knob="—", value="", direction="best")) == "best"
    on = OfatRow(knob="enable_prefix_caching", value=False, direction="up")
    assert ofat_label(on) == "enable_prefix_caching=False"
    step = OfatRow(knob="max_num_seqs", value=256, direction="down")
    assert ofat_label(step) == "max_num_seqs=256 (down)"
