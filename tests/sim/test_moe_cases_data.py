"""The published MoE runs (benchmarks/data/moe_published_cases.json) each say where they come
from, which publisher (the leave-one-source-out unit) and which engine; the SGLang ones are
marked as waiting for SGLang's semantics in the simulator."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def test_every_moe_run_has_its_source_publisher_and_engine() -> None:
    data = json.loads((DATA / "moe_published_cases.json").read_text("utf-8"))
    cases = data["cases"]
    assert len(cases) >= 150
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    for c in cases:
        assert c["source"] and c["source_group"], c["id"]
        assert c["engine"] in ("vllm", "sglang"), c["id"]
        assert (c["engine"] == "sglang") == ("pending" in c), c["id"]
        text = json.dumps(c).lower()
        assert "inferencex" not in text and "inferencemax" not in text, c["id"]
        if c.get("complete"):
            assert c["measured"].get("output_tok_s"), c["id"]
    assert len({c["source_group"] for c in cases}) >= 5
    assert {c["gpu"] for c in cases} >= {"H100", "H200", "B200", "MI300X"}
