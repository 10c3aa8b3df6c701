"""The knob registry: every engine spells every knob or says why it has none; spellings and
defaults by engine version; values checked; the tuner's view; differences."""

from __future__ import annotations

import pytest

from servetune.errors import ConfigError
from servetune.knobs import (
    ENGINES,
    KNOB_NAMES,
    KNOBS,
    Absent,
    Change,
    DefaultContext,
    Spelling,
    check_config,
    check_value,
    default,
    default_rule,
    diff,
    engine_knobs,
    flag,
    knob,
    note,
    parse_version,
    require,
    spelling,
    tunable,
)

BRIEF = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "max_model_len",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "max_num_partial_prefills",
    "enable_prefix_caching",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "block_size",
    "swap_space",
    "enforce_eager",
    "cudagraph_capture_sizes",
    "scheduling_policy",
    "ubatch_size",
    "threads",
    "flash_attn",
)


def test_the_knobs_the_seed_and_the_tuner_need_are_there() -> None:
    assert set(BRIEF) <= set(KNOB_NAMES)
    assert set(ENGINES) == {"vllm", "vllm-cpu", "sim", "sglang", "tgi", "llama.cpp", "trtllm"}


@pytest.mark.parametrize("name", KNOB_NAMES)
def test_every_engine_spells_the_knob_or_says_why_not(name: str) -> None:
    k = knob(name)
    assert k.summary and k.planner and k.planner_note
    for engine in ENGINES:
        assert engine in k.spellings, f"{name}: {engine} neither spelled nor explained"
        for s in k.spellings[engine]:
            if isinstance(s, Absent):
                assert len(s.reason) > 15, (name, engine)
            else:
                assert s.flag.startswith("-") or s.env or s.yaml, (name, engine)
        # the newest version has an answer
        got = spelling(engine, name)
        assert isinstance(got, Spelling | Absent)


def test_version_ranges_do_not_overlap() -> None:
    for k in KNOBS:
        for engine, spellings in k.spellings.items():
            probes = ["0.1", "0.7.3", "0.8.0", "0.8.5", "0.9.0", "0.10.2", "0.11.0", "0.11.1"]
            probes += ["0.32.0", "b100", "b6325", "b9000"]
            for p in probes:
                v = parse_version(p)
                hits = [
                    s
                    for s in spellings
                    if (s.since is None or v >= parse_version(s.since))
                    and (s.until is None or v < parse_version(s.until))
                ]
                assert len(hits) <= 1, (k.name, engine, p)


@pytest.mark.parametrize(
    ("engine", "name", "version", "expected"),
    [
        ("vllm", "max_num_seqs", None, "--max-num-seqs"),
        ("vllm", "gpu_memory_utilization", None, "--gpu-memory-utilization"),
        ("llama.cpp", "max_num_seqs", None, "-np"),
        ("llama.cpp", "max_model_len", None, "-c"),
        ("llama.cpp", "max_num_batched_tokens", None, "-b"),
        ("llama.cpp", "ubatch_size", None, "-ub"),
        ("llama.cpp", "threads", None, "-t"),
        ("llama.cpp", "flash_attn", None, "-fa"),
        ("llama.cpp", "kv_cache_dtype", None, "-ctk"),
        ("sglang", "max_num_seqs", None, "--max-running-requests"),
        ("sglang", "gpu_memory_utilization", None, "--mem-fraction-static"),
        ("sglang", "tensor_parallel_size", None, "--tp-size"),
        ("sglang", "enable_prefix_caching", None, "--disable-radix-cache"),
        ("sglang", "scheduling_policy", None, "--schedule-policy"),
        ("tgi", "max_num_batched_tokens", None, "--max-batch-prefill-tokens"),
        ("tgi", "tensor_parallel_size", None, "--num-shard"),
        ("tgi", "quantization", None, "--quantize"),
        ("tgi", "enable_prefix_caching", None, "PREFIX_CACHING"),
        ("vllm-cpu", "threads", None, "OMP_NUM_THREADS"),
        ("sim", "long_prefill_token_threshold", None, "--long-prefill-token-threshold"),
        # spellings that changed with the version
        ("vllm", "cudagraph_capture_sizes", "0.10.1", "--cuda-graph-sizes"),
        ("vllm", "cudagraph_capture_sizes", "0.11.1", "--cudagraph-capture-sizes"),
        ("vllm", "cudagraph_capture_sizes", "0.8.5", None),
        ("vllm", "swap_space", "0.10.2", "--swap-space"),
        ("vllm", "swap_space", None, None),
        ("vllm", "max_num_partial_prefills", "0.9.2", "--max-num-partial-prefills"),
        ("vllm", "max_num_partial_prefills", "0.11.0", None),
        ("vllm", "long_prefill_token_threshold", "0.7.2", None),
        ("vllm", "data_parallel_size", "0.7.3", None),
    ],
)
def test_flag(engine: str, name: str, version: str | None, expected: str | None) -> None:
    assert flag(engine, name, version) == expected


def test_chunked_prefill_off_is_spelled_by_version() -> None:
    old = spelling("vllm", "enable_chunked_prefill", "0.8.4")
    new = spelling("vllm", "enable_chunked_prefill", "0.10.0")
    assert isinstance(old, Spelling) and old.style == "bool_value"
    assert isinstance(new, Spelling) and new.style == "bool_optional"


@pytest.mark.parametrize(
    ("engine", "name"),
    [
        ("llama.cpp", "gpu_memory_utilization"),
        ("llama.cpp", "quantization"),
        ("llama.cpp", "tensor_parallel_size"),
        ("llama.cpp", "enable_chunked_prefill"),
        ("tgi", "enable_chunked_prefill"),
        ("sglang", "long_prefill_token_threshold"),
        ("tgi", "long_prefill_token_threshold"),
        ("llama.cpp", "long_prefill_token_threshold"),
        ("sglang", "enable_expert_parallel"),
        ("vllm", "ubatch_size"),
        ("vllm", "swap_space"),
    ],
)
def test_a_knob_an_engine_lacks_is_an_error_naming_the_engine(engine: str, name: str) -> None:
    assert flag(engine, name) is None
    with pytest.raises(ConfigError) as info:
        require(engine, name)
    assert info.value.message == f"engine {engine} has no knob {name}"
    assert info.value.code == "knob.absent"
    assert info.value.hint and info.value.hint == note(engine, name)


def test_llama_cpp_context_note_says_how_max_model_len_maps() -> None:
    text = note("llama.cpp", "max_model_len")
    assert text is not None and "-np" in text and "max_num_seqs" in text


def test_unknown_engine_and_knob() -> None:
    with pytest.raises(ConfigError, match="unknown engine 'trt'") as a:
        flag("trt", "max_num_seqs")
    with pytest.raises(ConfigError, match="unknown knob 'batch'") as b:
        flag("vllm", "batch")
    assert a.value.code == b.value.code == "knob.unknown"
    assert knob("--max-num-seqs").name == "max_num_seqs"


@pytest.mark.parametrize(
    ("ctx", "seqs", "tokens"),
    [
        (DefaultContext(device_name="A100-80GB", device_gib=79.2), 256, 2048),
        (DefaultContext(device_name="H100-80GB", device_gib=79.2), 1024, 8192),
        (DefaultContext(device_name="L40S", device_gib=44.4), 256, 2048),
        (DefaultContext(device_name="B200", device_gib=178.0), 1024, 16384),
        (DefaultContext(device_name="B200", device_gib=178.0, version=(0, 11, 0)), 1024, 8192),
        (DefaultContext(device_name="H100-80GB", device_gib=79.2, usage="llm_class"), 1024, 16384),
        (DefaultContext(version=(0, 7, 3), chunked_prefill=True), 256, 2048),
        (
            DefaultContext(
                device_name="A100-80GB", device_gib=79.2, chunked_prefill=False, max_model_len=32768
            ),
            256,
            32768,
        ),
    ],
)
def test_vllm_scheduler_defaults(ctx: DefaultContext, seqs: int, tokens: int) -> None:
    assert default("vllm", "max_num_seqs", ctx) == seqs
    assert default("vllm", "max_num_batched_tokens", ctx) == tokens


def test_other_defaults() -> None:
    assert default("vllm-cpu", "max_num_seqs") == 128
    assert default("vllm", "enable_chunked_prefill") is True
    assert default("vllm", "enable_chunked_prefill", DefaultContext(version=(0, 7, 3))) is False
    assert default("vllm", "gpu_memory_utilization") == 0.9
    assert default("llama.cpp", "max_num_seqs", DefaultContext(version=(5000,))) == 1
    assert default("llama.cpp", "max_num_seqs") == 4
    assert "max_position_embeddings" in default_rule("vllm", "max_model_len")
    # unknown because it depends on what the context does not say
    assert default("vllm", "max_num_batched_tokens", DefaultContext(chunked_prefill=False)) is None


def test_values_are_checked() -> None:
    assert check_value("max_num_seqs", "64") == 64
    assert check_value("enable_chunked_prefill", "false") is False
    assert check_value("gpu_memory_utilization", "0.85") == 0.85
    assert check_value("cudagraph_capture_sizes", "1,2,4") == [1, 2, 4]
    assert check_value("quantization", None) is None
    for name, bad in (
        ("max_num_seqs", 0),
        ("max_num_seqs", 2.5),
        ("max_num_seqs", True),
        ("gpu_memory_utilization", 1.5),
        ("kv_cache_dtype", "int3"),
        ("enable_chunked_prefill", "maybe"),
    ):
        with pytest.raises(ConfigError) as info:
            check_value(name, bad)
        assert info.value.code == "knob.value" and name in info.value.message


def test_check_config_finds_conflicts_and_absent_knobs() -> None:
    ok = check_config("vllm", {"max-num-seqs": 64, "max_num_batched_tokens": 2048})
    assert ok == {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
    with pytest.raises(ConfigError, match="must be ≥ max_num_seqs") as a:
        check_config("vllm", {"max_num_seqs": 512, "max_num_batched_tokens": 256})
    assert a.value.code == "knob.conflict"
    with pytest.raises(ConfigError, match="with chunked prefill off"):
        check_config(
            "sim",
            {
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": 4096,
                "max_model_len": 8192,
            },
        )
    with pytest.raises(ConfigError, match="-ub") as b:
        check_config("llama.cpp", {"ubatch_size": 1024, "max_num_batched_tokens": 512})
    assert b.value.code == "knob.conflict"
    with pytest.raises(ConfigError, match="engine tgi has no knob"):
        check_config("tgi", {"enable_chunked_prefill": True})


def test_tunable_knobs_and_their_ranges() -> None:
    names = [t.name for t in tunable("vllm")]
    assert names[:2] == ["max_num_seqs", "max_num_batched_tokens"]
    assert "max_model_len" not in names and "dtype" not in names
    assert "swap_space" not in names and "max_num_partial_prefills" not in names
    assert "max_num_partial_prefills" in [t.name for t in tunable("vllm", "0.9.0")]
    seqs = next(t for t in tunable("vllm") if t.name == "max_num_seqs")
    assert seqs.flag == "--max-num-seqs" and seqs.grid() == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert "activation_peak" in seqs.planner
    util = next(t for t in tunable("vllm") if t.name == "gpu_memory_utilization")
    grid = util.grid(4)
    assert grid[0] == 0.8 and grid[-1] == 0.95
    llama = {t.name: t for t in tunable("llama.cpp")}
    assert set(llama) >= {"max_num_seqs", "ubatch_size", "threads", "flash_attn"}
    assert "gpu_memory_utilization" not in llama and llama["max_num_seqs"].flag == "-np"
    # every tunable knob is one the engine has
    for engine in ENGINES:
        for t in tunable(engine):
            assert t.name in engine_knobs(engine)


def test_diff() -> None:
    changes = diff(
        {"max_num_seqs": 128, "enable_chunked_prefill": True},
        {"max-num-seqs": "256", "enable_chunked_prefill": True, "kv_cache_dtype": "fp8"},
    )
    assert changes == [
        Change("max_num_seqs", 128, 256),
        Change("kv_cache_dtype", None, "fp8"),
    ]
    assert changes[0].describe() == "--max-num-seqs: --max-num-seqs 128 → --max-num-seqs 256"
    assert changes[1].describe("llama.cpp") == "-ctk: default → -ctk q8_0 -ctv q8_0"
    assert diff({"max_num_seqs": 8}, {"max_num_seqs": 8}) == []


def test_versions_are_read_or_refused() -> None:
    assert parse_version("v0.10.1.1") == (0, 10, 1, 1)
    assert parse_version("0.9.0rc1") == (0, 9, 0)
    assert parse_version("0.32.0+cpu") == (0, 32, 0)
    assert parse_version("b6325") == (6325,)
    with pytest.raises(ConfigError) as info:
        parse_version("latest")
    assert info.value.code == "knob.version"


def test_the_registry_imports_nothing_above_it() -> None:
    import ast
    from pathlib import Path

    import servetune.knobs as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("servetune")
            ):
                assert node.module.split(".")[1] in ("knobs", "errors", "profiles"), (
                    path,
                    node.module,
                )
