"""The knobs, as data: for each, its type and range, every engine's spelling by version (or
why the engine has none), its defaults, where a tuner looks, and what the memory planner does
with it.

Engine-neutral names are vLLM's (``EngineArgs`` fields): vLLM is the engine most users tune,
so its flag is the name with ``-`` for ``_``. Engines: ``vllm`` (GPU), ``vllm-cpu`` (vLLM's
CPU build), ``sim`` (servetune's simulated engine, spelled as the newest vLLM), ``sglang``
(``python -m sglang.launch_server``), ``tgi`` (``text-generation-launcher``), ``llama.cpp``
(``llama-server``).

Sources: vLLM ``vllm/engine/arg_utils.py`` and ``vllm/config/*.py`` (the installed CPU build,
0.32, is checked flag by flag against its own parser in tests/knobs); SGLang
``docs/advanced_features/server_arguments.md``; TGI ``text-generation-launcher --help``
(v3); llama.cpp ``common/arg.cpp`` (the provisioned build). Version bounds of older vLLM
spellings are those of the release notes: V1 by default from 0.8.0; boolean flags as
``--flag/--no-flag`` once the engine arguments were generated from the config dataclasses
(0.8.5); V0 (and with it swap space and partial prefills) removed in 0.11.0; CUDA-graph sizes
``--cuda-graph-sizes`` (0.9.0) renamed ``--cudagraph-capture-sizes`` with
``--max-cudagraph-capture-size`` (0.11.1).
"""

from __future__ import annotations

from servetune.knobs import defaults as d
from servetune.knobs.model import Absent, Default, Knob, KnobValue, SearchRange, Spelling
from servetune.profiles import ENGINE_IDS

VLLM_BOOL_FLAGS_SINCE = "0.8.5"
V0_REMOVED = "0.11.0"
GRAPH_SIZES_RENAMED = "0.11.1"
LLAMA_FA_VALUE_SINCE = "b6325"
"""llama.cpp build from which ``-fa`` takes on|off|auto (default auto); before, a bare flag."""

VLLM_LIKE = ("vllm", "vllm-cpu", "sim")
ENGINES = ENGINE_IDS
"""The engines, as their profiles register them (:mod:`servetune.profiles`)."""
SGLANG_GRAPH_FLAGS_SPLIT = "0.5.23"
"""SGLang's --cuda-graph-max-bs became --cuda-graph-max-bs-decode / -prefill (a cuda-graph
config per phase): present in 0.5.23's parser, absent in 0.5.x server_args of late 2025; the
release that made the change is not pinned (0.5.23 is the first checked)."""
SIM_SGLANG_ONLY = "the simulated engine honours it with SGLang's semantics (--engine sglang)"


def _vllm(*spellings: Spelling | Absent) -> dict[str, tuple[Spelling | Absent, ...]]:
    """The same spellings for vLLM, its CPU build and the simulated engine."""
    return {e: spellings for e in VLLM_LIKE}


def _const(value: KnobValue | None) -> tuple[Default, ...]:
    return (Default(value=value),)


KNOBS: tuple[Knob, ...] = (
    Knob(
        name="max_num_seqs",
        type="int",
        low=1,
        summary="requests running at once (the batch cap)",
        planner=("activation_peak", "cuda_graphs"),
        planner_note="the profiling run samples this many requests at once (the sampler's "
        "logits buffer); CUDA graphs are captured up to 2× it (at most 512)",
        spellings={
            **_vllm(Spelling("--max-num-seqs")),
            "sglang": (Spelling("--max-running-requests"),),
            "tgi": (
                Spelling(
                    "--max-batch-size",
                    note="TGI caps the running batch by tokens (--max-batch-total-tokens); "
                    "--max-batch-size adds a request cap",
                ),
            ),
            "llama.cpp": (
                Spelling(
                    "-np",
                    aliases=("--parallel",),
                    note="the server's slots; -c is shared among them",
                ),
            ),
            "trtllm": (Spelling("--max_batch_size"),),
        },
        defaults={
            "vllm": (
                Default(
                    rule="256, or 1024 on a ≥ 70 GiB GPU other than A100 (V1; see "
                    "servetune.knobs.defaults)",
                    fn=d.max_num_seqs_default,
                ),
            ),
            "sim": (Default(rule="as vLLM (V1)", fn=d.max_num_seqs_default),),
            "vllm-cpu": (Default(rule="128 × the world size", fn=d.vllm_cpu_max_num_seqs),),
            "sglang": (Default(rule="derived from the KV pool at start-up"),),
            "tgi": (Default(rule="none (bounded by --max-batch-total-tokens)"),),
            "llama.cpp": (
                Default(value=1, until=LLAMA_FA_VALUE_SINCE),
                Default(value=4, rule="auto: 4 slots with a unified KV cache (-np -1)"),
            ),
            "trtllm": (Default(rule="the LLM API's BuildConfig default (by release)"),),
        },
        search=SearchRange(low=8, high=1024, log=True),
        requires="≤ max_num_batched_tokens (vLLM)",
    ),
    Knob(
        name="max_num_batched_tokens",
        type="int",
        low=1,
        summary="tokens one engine step may compute (prefill chunks + decodes)",
        planner=("activation_peak",),
        planner_note="the profiling run's activation peak is a step of this many tokens: a "
        "bigger budget leaves less memory for the KV pool",
        spellings={
            **_vllm(Spelling("--max-num-batched-tokens")),
            "sglang": (
                Spelling(
                    "--max-prefill-tokens",
                    note="the prefill batch's token cap; the chunk of chunked prefill is "
                    "--chunked-prefill-size",
                ),
            ),
            "tgi": (Spelling("--max-batch-prefill-tokens"),),
            "llama.cpp": (
                Spelling(
                    "-b",
                    aliases=("--batch-size",),
                    note="the logical batch; it runs in -ub micro-batches",
                ),
            ),
            "trtllm": (Spelling("--max_num_tokens"),),
        },
        defaults={
            "vllm": (
                Default(
                    rule="2048, or 8192 on a ≥ 70 GiB GPU other than A100; with chunked "
                    "prefill off at least max_model_len (V1; see servetune.knobs.defaults)",
                    fn=d.max_num_batched_tokens_default,
                ),
            ),
            "sim": (Default(rule="as vLLM (V1)", fn=d.max_num_batched_tokens_default),),
            "vllm-cpu": (
                Default(rule="2048 × the world size", fn=d.vllm_cpu_max_num_batched_tokens),
            ),
            "sglang": _const(16384),
            "tgi": (Default(rule="auto: from the free memory at start-up (v3)"),),
            "llama.cpp": _const(2048),
        },
        search=SearchRange(low=512, high=16384, log=True),
        requires="≥ max_num_seqs; with chunked prefill off ≥ max_model_len (vLLM)",
    ),
    Knob(
        name="gpu_memory_utilization",
        type="float",
        low=0.05,
        high=1.0,
        summary="share of the device's memory the engine may use (weights + activations + KV pool)",
        planner=("kv_pool",),
        planner_note="the KV pool is this share of the memory minus weights, the activation "
        "peak, CUDA graphs and non-torch memory",
        spellings={
            "vllm": (
                Spelling("--gpu-memory-utilization", aliases=("--device-memory-utilization",)),
            ),
            "sim": (Spelling("--gpu-memory-utilization"),),
            "vllm-cpu": (
                Spelling(
                    "--gpu-memory-utilization",
                    note="on the CPU build, the share of CPU memory reserved for the worker; "
                    "an explicit pool (--kv-cache-memory-bytes) wins",
                ),
            ),
            "sglang": (
                Spelling(
                    "--mem-fraction-static",
                    note="the static share for weights and the KV pool (activations are "
                    "outside it)",
                ),
            ),
            "tgi": (Spelling("--cuda-memory-fraction"),),
            "trtllm": (
                Spelling(
                    "--kv_cache_free_gpu_memory_fraction",
                    aliases=("--free_gpu_memory_fraction",),
                    note="the share of the memory left free after the weights and buffers "
                    "that the KV cache takes, not of the whole device",
                ),
            ),
            "llama.cpp": (
                Absent(
                    "llama.cpp sizes its KV cache from -c (the context of all slots), not "
                    "from a memory share"
                ),
            ),
        },
        defaults={
            **{e: _const(0.9) for e in VLLM_LIKE},
            "sglang": (Default(rule="by GPU memory and TP size at start-up"),),
            "tgi": _const(1.0),
            "trtllm": _const(0.9),
        },
        search=SearchRange(low=0.80, high=0.95),
    ),
    Knob(
        name="max_model_len",
        type="int",
        low=1,
        summary="prompt + output of one request (the context cap)",
        planner=("admission", "activation_peak"),
        planner_note="one request of this length must fit the KV pool or the engine refuses "
        "to start; without chunked prefill the step budget, and with it the activation peak, "
        "follows it",
        spellings={
            **_vllm(Spelling("--max-model-len")),
            "sglang": (Spelling("--context-length"),),
            "tgi": (Spelling("--max-total-tokens"),),
            "trtllm": (Spelling("--max_seq_len"),),
            "llama.cpp": (
                Spelling(
                    "-c",
                    style="slots_total",
                    aliases=("--ctx-size",),
                    note="-c is the total context of all -np slots: -c = max_model_len × "
                    "max_num_seqs",
                ),
            ),
        },
        defaults={
            **{
                e: (Default(rule="the model's max_position_embeddings"),)
                for e in (*VLLM_LIKE, "sglang")
            },
            "tgi": (Default(rule="the model's maximum (v3: bounded by free memory)"),),
            "llama.cpp": (Default(rule="the model's training context (-c 0)"),),
        },
        search=None,
    ),
    Knob(
        name="enable_chunked_prefill",
        type="bool",
        summary="split long prefills into chunks that run beside the decodes",
        planner=("activation_peak",),
        planner_note="off, the step budget must hold one whole max_model_len prompt: the "
        "activation peak grows with max_model_len",
        spellings={
            "vllm": (
                Spelling(
                    "--enable-chunked-prefill",
                    style="bool_value",
                    words=("True", "False"),
                    until=VLLM_BOOL_FLAGS_SINCE,
                ),
                Spelling(
                    "--enable-chunked-prefill", style="bool_optional", since=VLLM_BOOL_FLAGS_SINCE
                ),
            ),
            "vllm-cpu": (Spelling("--enable-chunked-prefill", style="bool_optional"),),
            "sim": (Spelling("--enable-chunked-prefill", style="bool_optional"),),
            "sglang": (
                Spelling(
                    "--chunked-prefill-size",
                    style="off_value",
                    off="-1",
                    turn_on="8192",
                    turn_on_from="max_num_batched_tokens",
                    note="on by default; off is --chunked-prefill-size -1",
                ),
            ),
            "trtllm": (
                Spelling("--enable_chunked_prefill", style="switch", note="off by default"),
            ),
            "tgi": (
                Absent(
                    "TGI (v3) chunks prefills itself where the attention backend supports "
                    "it; there is no flag"
                ),
            ),
            "llama.cpp": (
                Absent(
                    "llama.cpp always processes a prompt in -ub micro-batches beside the "
                    "other slots' decodes"
                ),
            ),
        },
        defaults={
            **{e: (Default(rule="on in V1, off in V0", fn=d.v1_on),) for e in VLLM_LIKE},
            "sglang": _const(True),
            "trtllm": _const(False),
        },
        search=SearchRange(choices=(True, False)),
    ),
    Knob(
        name="long_prefill_token_threshold",
        type="int",
        low=0,
        summary="cap on one request's prefill chunk per step (0 = none), so a long prompt "
        "leaves budget for the ones behind it",
        planner=("none",),
        planner_note="scheduling only",
        spellings={
            "trtllm": (
                Absent("trtllm-serve has no per-request chunk cap; --max_num_tokens bounds a step"),
            ),
            "vllm": (
                Absent("added in vLLM 0.7.3", until="0.7.3"),
                Spelling("--long-prefill-token-threshold", since="0.7.3"),
            ),
            "vllm-cpu": (Spelling("--long-prefill-token-threshold"),),
            "sim": (Spelling("--long-prefill-token-threshold"),),
            "sglang": (
                Absent(
                    "SGLang has no per-request chunk cap; a smaller --chunked-prefill-size "
                    "shortens the wait"
                ),
            ),
            "tgi": (Absent("TGI schedules prefills itself"),),
            "llama.cpp": (Absent("each slot's prompt is processed in -ub micro-batches"),),
        },
        defaults={e: _const(0) for e in VLLM_LIKE},
        search=SearchRange(choices=(0, 256, 512, 1024, 2048)),
        requires="≤ max_model_len",
    ),
    Knob(
        name="max_num_partial_prefills",
        type="int",
        low=1,
        summary="prefills that may be chunked concurrently (V0 only)",
        planner=("none",),
        planner_note="scheduling only",
        spellings={
            "trtllm": (
                Absent("TensorRT-LLM has no concurrent partial prefills setting (V0 vLLM only)"),
            ),
            "vllm": (
                Absent("added in vLLM 0.7.3", until="0.7.3"),
                Spelling(
                    "--max-num-partial-prefills",
                    since="0.7.3",
                    until=V0_REMOVED,
                    note="honoured by the V0 engine only (VLLM_USE_V1=0)",
                ),
                Absent("V0 was removed in vLLM 0.11.0; V1 has no such knob", since=V0_REMOVED),
            ),
            "vllm-cpu": (Absent("V0 was removed in vLLM 0.11.0; V1 has no such knob"),),
            "sim": (
                Absent("the simulated engine is vLLM V1, which has no concurrent partial prefills"),
            ),
            "sglang": (Absent("SGLang chunks one prefill batch at a time"),),
            "tgi": (Absent("TGI schedules prefills itself"),),
            "llama.cpp": (Absent("every slot prefills in turn within -b per step"),),
        },
        defaults={"vllm": _const(1)},
        search=SearchRange(choices=(1, 2, 4)),
    ),
    Knob(
        name="enable_prefix_caching",
        type="bool",
        summary="reuse the KV blocks of shared prompt prefixes",
        planner=("none",),
        planner_note="the pool's size is unchanged; cached blocks are evicted on demand",
        spellings={
            "vllm": (
                Spelling("--enable-prefix-caching", style="switch", until="0.8.0"),
                Spelling(
                    "--enable-prefix-caching",
                    style="bool_value",
                    words=("True", "False"),
                    since="0.8.0",
                    until=VLLM_BOOL_FLAGS_SINCE,
                ),
                Spelling(
                    "--enable-prefix-caching", style="bool_optional", since=VLLM_BOOL_FLAGS_SINCE
                ),
            ),
            "vllm-cpu": (Spelling("--enable-prefix-caching", style="bool_optional"),),
            "sim": (Spelling("--enable-prefix-caching", style="bool_optional"),),
            "sglang": (
                Spelling(
                    "--disable-radix-cache",
                    style="switch",
                    on=False,
                    note="the radix cache is on by default",
                ),
            ),
            "tgi": (
                Spelling(
                    "PREFIX_CACHING",
                    style="bool_value",
                    words=("1", "0"),
                    env="PREFIX_CACHING",
                    note="an environment variable of the launcher (v3: on by default)",
                ),
            ),
            "trtllm": (
                Spelling(
                    "kv_cache_config.enable_block_reuse",
                    yaml="kv_cache_config.enable_block_reuse",
                    note="an option of the YAML side file (--extra_llm_api_options)",
                ),
            ),
            "llama.cpp": (
                Absent(
                    "llama.cpp reuses each slot's previous prompt by itself (the request's "
                    "cache_prompt, on by default); --cache-reuse N sets the shortest shifted "
                    "chunk reused"
                ),
            ),
        },
        defaults={
            **{e: (Default(rule="on in V1, off in V0", fn=d.v1_on),) for e in VLLM_LIKE},
            "sglang": _const(True),
            "tgi": _const(True),
            "trtllm": (Default(rule="on (the PyTorch backend's KvCacheConfig)"),),
        },
        search=SearchRange(choices=(True, False), why="only pays when prompts share prefixes"),
    ),
    Knob(
        name="kv_cache_dtype",
        type="choice",
        choices=(
            "auto",
            "fp8",
            "fp8_e4m3",
            "fp8_e5m2",
            "float16",
            "bfloat16",
            "q8_0",
            "q4_0",
            "q4_1",
            "q5_0",
            "q5_1",
            "iq4_nl",
        ),
        summary="the KV cache's data type (auto: the model's)",
        planner=("kv_per_token",),
        planner_note="fp8 halves the bytes per cached token: the same pool holds twice the tokens",
        spellings={
            "vllm": (
                Spelling(
                    "--kv-cache-dtype",
                    choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "float16", "bfloat16"),
                ),
            ),
            "vllm-cpu": (
                Spelling(
                    "--kv-cache-dtype",
                    choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "float16", "bfloat16"),
                ),
            ),
            "sim": (Spelling("--kv-cache-dtype", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),),
            "sglang": (
                Spelling(
                    "--kv-cache-dtype",
                    values={"fp8": "fp8_e5m2"},
                    choices=("auto", "fp8_e5m2", "fp8_e4m3"),
                ),
            ),
            "tgi": (
                Spelling(
                    "--kv-cache-dtype",
                    values={"fp8": "fp8_e4m3"},
                    choices=("fp8_e4m3", "fp8_e5m2"),
                    note="unset is the model's dtype",
                ),
            ),
            "llama.cpp": (
                Spelling(
                    "-ctk",
                    aliases=("--cache-type-k",),
                    also=("-ctv",),
                    values={"auto": "f16", "fp8": "q8_0", "float16": "f16", "bfloat16": "bf16"},
                    choices=(
                        "f32",
                        "f16",
                        "bf16",
                        "q8_0",
                        "q4_0",
                        "q4_1",
                        "iq4_nl",
                        "q5_0",
                        "q5_1",
                    ),
                    note="sets both -ctk and -ctv; 8 bits is q8_0 (an integer format, not "
                    "fp8); a quantized V cache needs flash attention",
                ),
            ),
            "trtllm": (
                Spelling(
                    "kv_cache_config.dtype",
                    yaml="kv_cache_config.dtype",
                    values={"fp8_e4m3": "fp8"},
                    choices=("auto", "fp8"),
                    note="an option of the YAML side file (--extra_llm_api_options)",
                ),
            ),
        },
        defaults={e: _const("auto") for e in (*VLLM_LIKE, "sglang", "tgi", "llama.cpp")},
        search=SearchRange(choices=("auto", "fp8"), why="fp8 costs some quality: check it"),
    ),
    Knob(
        name="quantization",
        type="choice",
        nullable=True,
        summary="weight quantization method (None: the checkpoint's own dtype)",
        planner=("weights",),
        planner_note="fp8 halves the weights' bytes, int4 (AWQ/GPTQ) and FP4 (MXFP4, NVFP4) "
        "about quarter them; the memory freed goes to the KV pool",
        spellings={
            "trtllm": (
                Absent(
                    "TensorRT-LLM reads the quantization from the checkpoint: serve a quantized "
                    "one (ModelOpt FP8/NVFP4)"
                ),
            ),
            "vllm": (
                Spelling("--quantization", aliases=("-q",), values={"nvfp4": "modelopt_fp4"}),
            ),
            "vllm-cpu": (Spelling("--quantization", aliases=("-q",)),),
            "sim": (
                Spelling(
                    "--quantization",
                    aliases=("-q",),
                    values={"nvfp4": "modelopt_fp4"},
                    choices=(
                        "fp8",
                        "awq",
                        "gptq",
                        "awq_marlin",
                        "gptq_marlin",
                        "mxfp4",
                        "nvfp4",
                        "modelopt_fp4",
                    ),
                ),
            ),
            "sglang": (Spelling("--quantization", values={"nvfp4": "modelopt_fp4"}),),
            "tgi": (Spelling("--quantize"),),
            "llama.cpp": (
                Absent(
                    "llama.cpp's quantization is the GGUF file's: serve a quantized GGUF "
                    "(e.g. Q4_K_M) instead"
                ),
            ),
        },
        defaults={e: _const(None) for e in (*VLLM_LIKE, "sglang", "tgi")},
        search=SearchRange(
            choices=(None, "fp8"),
            why="AWQ/GPTQ need a pre-quantized checkpoint; fp8 quantizes online",
        ),
    ),
    Knob(
        name="dtype",
        type="choice",
        choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
        summary="the weights' and activations' data type",
        planner=("weights",),
        planner_note="float32 doubles the weights' bytes against bf16/fp16",
        spellings={
            "trtllm": (Absent("trtllm-serve takes the data type from the checkpoint; no flag"),),
            "vllm": (Spelling("--dtype"),),
            "vllm-cpu": (Spelling("--dtype", note="the CPU build runs float32 or bfloat16"),),
            "sim": (
                Absent(
                    "the simulated engine models 16-bit weights; --quantization sets fewer bits"
                ),
            ),
            "sglang": (Spelling("--dtype"),),
            "tgi": (Spelling("--dtype", choices=("float16", "bfloat16")),),
            "llama.cpp": (Absent("llama.cpp computes in the GGUF file's types"),),
        },
        defaults={e: _const("auto") for e in ("vllm", "vllm-cpu", "sglang")},
        search=None,
    ),
    Knob(
        name="tensor_parallel_size",
        type="int",
        low=1,
        summary="GPUs one copy of the model is split over, tensor by tensor",
        planner=("weights", "kv_per_token"),
        planner_note="weights and KV heads are divided over the GPUs: each holds 1/tp of "
        "both, so the pool per GPU grows",
        spellings={
            **_vllm(Spelling("--tensor-parallel-size", aliases=("-tp",))),
            "sglang": (Spelling("--tp-size", aliases=("--tensor-parallel-size",)),),
            "tgi": (Spelling("--num-shard"),),
            "trtllm": (Spelling("--tp_size", aliases=("--tensor_parallel_size",)),),
            "llama.cpp": (
                Absent(
                    "llama.cpp splits over GPUs with --split-mode and --tensor-split, not "
                    "tensor parallelism of a given size"
                ),
            ),
        },
        defaults={e: _const(1) for e in (*VLLM_LIKE, "sglang", "tgi")},
        search=SearchRange(choices=(1, 2, 4, 8), why="bounded by the GPUs you have"),
        requires="divides the model's attention heads",
    ),
    Knob(
        name="pipeline_parallel_size",
        type="int",
        low=1,
        summary="GPUs the layers are split over, stage by stage",
        planner=("weights", "kv_per_token"),
        planner_note="each stage holds its layers' weights and KV",
        spellings={
            "vllm": (Spelling("--pipeline-parallel-size", aliases=("-pp",)),),
            "vllm-cpu": (Spelling("--pipeline-parallel-size", aliases=("-pp",)),),
            "sim": (Absent("the simulated engine models tensor parallelism only"),),
            "sglang": (Spelling("--pp-size", aliases=("--pipeline-parallel-size",)),),
            "trtllm": (Spelling("--pp_size", aliases=("--pipeline_parallel_size",)),),
            "tgi": (Absent("TGI shards tensors only (--num-shard)"),),
            "llama.cpp": (Absent("llama.cpp splits layers over GPUs with --split-mode layer"),),
        },
        defaults={e: _const(1) for e in ("vllm", "vllm-cpu", "sglang")},
        search=SearchRange(choices=(1, 2, 4), why="bounded by the GPUs you have"),
    ),
    Knob(
        name="data_parallel_size",
        type="int",
        low=1,
        summary="replicas of the engine behind one server (of its attention, for a MoE model)",
        planner=("replicas",),
        planner_note="each replica has its own weights and pool; memory per replica is "
        "unchanged. With a mixture-of-experts model the replicas are data-parallel attention "
        "in one engine: their MoE layers run together, the experts split over every GPU",
        spellings={
            "trtllm": (
                Absent(
                    "trtllm-serve serves one replica (attention DP is an LLM-API option for MoE); "
                    "run several behind a load balancer"
                ),
            ),
            "vllm": (
                Absent("added in vLLM 0.8.0; run replicas behind a load balancer", until="0.8.0"),
                Spelling("--data-parallel-size", aliases=("-dp",), since="0.8.0"),
            ),
            "vllm-cpu": (Spelling("--data-parallel-size", aliases=("-dp",)),),
            "sim": (Spelling("--data-parallel-size", aliases=("-dp",)),),
            "sglang": (Spelling("--dp-size", aliases=("--data-parallel-size",)),),
            "tgi": (Absent("TGI serves one replica; run several behind a load balancer"),),
            "llama.cpp": (
                Absent("llama.cpp serves one replica; run several behind a load balancer"),
            ),
        },
        defaults={e: _const(1) for e in ("vllm", "vllm-cpu", "sim", "sglang")},
        search=SearchRange(choices=(1, 2, 4, 8), why="bounded by the GPUs you have"),
    ),
    Knob(
        name="enable_expert_parallel",
        type="bool",
        summary="spread a MoE model's experts over the GPUs (whole experts per GPU) instead "
        "of splitting every expert",
        planner=("weights",),
        planner_note="each GPU holds 1/(tp·dp) of the experts, whole; the attention is split "
        "as before",
        spellings={
            "trtllm": (
                Absent(
                    "trtllm-serve sets the expert-parallel size itself: --ep_size "
                    "(expert_parallel_size)"
                ),
            ),
            **_vllm(Spelling("--enable-expert-parallel", aliases=("-ep",), style="switch")),
            "sglang": (
                Absent("SGLang sets the expert-parallel size: --ep-size (expert_parallel_size)"),
            ),
            "tgi": (Absent("TGI shards experts with the tensors (--num-shard)"),),
            "llama.cpp": (Absent("llama.cpp has no expert parallelism"),),
        },
        defaults={e: _const(False) for e in VLLM_LIKE},
        search=SearchRange(
            choices=(False, True), why="MoE models only: trades all-to-all for split experts"
        ),
        requires="a mixture-of-experts model",
    ),
    Knob(
        name="expert_parallel_size",
        type="int",
        low=1,
        summary="GPUs the experts are spread over (SGLang's --ep-size)",
        planner=("weights",),
        planner_note="each GPU holds 1/ep of the experts, whole",
        spellings={
            "trtllm": (Spelling("--ep_size", aliases=("--moe_expert_parallel_size",)),),
            **_vllm(
                Absent(
                    "vLLM's expert-parallel size is tp × dp: turn it on with "
                    "--enable-expert-parallel"
                )
            ),
            "sim": (Spelling("--expert-parallel-size", note=SIM_SGLANG_ONLY),),
            "sglang": (Spelling("--ep-size", aliases=("--expert-parallel-size",)),),
            "tgi": (Absent("TGI shards experts with the tensors (--num-shard)"),),
            "llama.cpp": (Absent("llama.cpp has no expert parallelism"),),
        },
        defaults={"sglang": _const(1)},
        search=SearchRange(choices=(1, 2, 4, 8), why="divides --tp"),
        requires="divides the tensor-parallel size; a mixture-of-experts model",
    ),
    Knob(
        name="enable_dp_attention",
        type="bool",
        summary="data-parallel attention within one engine (SGLang)",
        planner=("kv_per_token", "weights"),
        planner_note="attention is split tp/dp ways and replicated dp times: each replica "
        "keeps its own requests' KV (an MLA latent is no longer copied on every GPU)",
        spellings={
            "trtllm": (
                Spelling(
                    "enable_attention_dp",
                    yaml="enable_attention_dp",
                    note="an option of the YAML side file (--extra_llm_api_options)",
                ),
            ),
            **_vllm(
                Absent("vLLM's data-parallel attention is --data-parallel-size with a MoE model")
            ),
            "sim": (Spelling("--enable-dp-attention", style="switch", note=SIM_SGLANG_ONLY),),
            "sglang": (Spelling("--enable-dp-attention", style="switch"),),
            "tgi": (Absent("TGI has no data-parallel attention"),),
            "llama.cpp": (Absent("llama.cpp has no data-parallel attention"),),
        },
        defaults={"sglang": _const(False)},
        search=SearchRange(choices=(False, True), why="MoE models with MLA gain most"),
        requires="--dp divides --tp",
    ),
    Knob(
        name="async_scheduling",
        type="bool",
        summary="schedule the next step while the GPU runs this one",
        planner=("none",),
        planner_note="scheduling only: the CPU's per-step work overlaps the GPU's",
        spellings={
            "trtllm": (
                Absent(
                    "TensorRT-LLM overlaps scheduling with the step by default; the LLM-API "
                    "option disable_overlap_scheduler (side file) turns it off"
                ),
            ),
            "vllm": (
                Absent("added in vLLM 0.10.1", until="0.10.1"),
                Spelling("--async-scheduling", style="bool_optional", since="0.10.1"),
            ),
            "vllm-cpu": (Spelling("--async-scheduling", style="bool_optional"),),
            "sim": (Spelling("--async-scheduling", style="bool_optional"),),
            "sglang": (
                Spelling(
                    "--disable-overlap-schedule",
                    style="switch",
                    on=False,
                    note="SGLang overlaps scheduling by default",
                ),
            ),
            "tgi": (Absent("TGI's router schedules on its own"),),
            "llama.cpp": (Absent("llama.cpp's server loop is single-threaded"),),
        },
        defaults={
            **{e: (Default(rule="on after vLLM 0.11.0", fn=d.async_default),) for e in VLLM_LIKE},
            "sglang": _const(True),
        },
        search=None,  # on wherever the release has it: a version's setting, not a trade-off
    ),
    Knob(
        name="speculative_method",
        type="choice",
        choices=("mtp", "deepseek_mtp", "eagle", "eagle3", "ngram"),
        nullable=True,
        summary="speculative decoding's drafter (None: off): the model's own multi-token-"
        "prediction layers (mtp), an EAGLE head, or n-gram lookup in the context",
        planner=("weights",),
        planner_note="mtp loads the model's MTP layers as the draft (their weights join the "
        "model's); each decode step verifies num_speculative_tokens + 1 tokens per request",
        spellings={
            "vllm": (
                Spelling(
                    "--speculative-config",
                    aliases=("-sc",),
                    style="json_key",
                    key="method",
                    note='eagle and eagle3 also need the draft\'s checkpoint ("model")',
                ),
            ),
            "vllm-cpu": (
                Spelling("--speculative-config", aliases=("-sc",), style="json_key", key="method"),
            ),
            "sim": (
                Spelling(
                    "--speculative-config",
                    aliases=("-sc",),
                    style="json_key",
                    key="method",
                    choices=("mtp", "deepseek_mtp", "ngram"),
                    note="the simulated engine drafts with the model's MTP layers or n-gram "
                    "lookup; an EAGLE head is another model it has no architecture of",
                ),
            ),
            "sglang": (
                Absent(
                    "not in the registry yet: SGLang spells it --speculative-algorithm "
                    "NEXTN|EAGLE|EAGLE3|NGRAM with --speculative-num-steps, "
                    "--speculative-eagle-topk and --speculative-num-draft-tokens"
                ),
            ),
            "tgi": (
                Absent("TGI speculates with the model's Medusa heads or n-gram (--speculate N)"),
            ),
            "llama.cpp": (
                Absent("llama.cpp drafts with a separate draft model (-md), not a method name"),
            ),
            "trtllm": (
                Absent(
                    "not in the registry yet: TensorRT-LLM sets it in its YAML side file "
                    "(speculative_config: decoding_type MTP, Eagle, NGram)"
                ),
            ),
        },
        defaults={e: _const(None) for e in VLLM_LIKE},
        search=SearchRange(
            choices=("mtp",),  # and the default: off
            why="models that ship MTP layers only; the gain rests on the acceptance rate",
        ),
        requires="mtp: a model with MTP layers; eagle/eagle3: a draft checkpoint",
    ),
    Knob(
        name="num_speculative_tokens",
        type="int",
        low=1,
        high=16,
        summary="tokens the drafter proposes per step (each decode step verifies this + 1)",
        planner=("activation_peak",),
        planner_note="a decode step computes num_speculative_tokens + 1 tokens per request",
        spellings={
            **_vllm(
                Spelling(
                    "--speculative-config",
                    aliases=("-sc",),
                    style="json_key",
                    key="num_speculative_tokens",
                )
            ),
            "sglang": (
                Absent(
                    "not in the registry yet: SGLang's draft length is --speculative-num-steps "
                    "(with --speculative-eagle-topk 1, --speculative-num-draft-tokens steps + 1)"
                ),
            ),
            "tgi": (Spelling("--speculate"),),
            "llama.cpp": (Absent("llama.cpp's draft length is the draft model's (--draft-max)"),),
            "trtllm": (
                Absent(
                    "not in the registry yet: TensorRT-LLM sets it in its YAML side file "
                    "(speculative_config.num_nextn_predict_layers for MTP)"
                ),
            ),
        },
        defaults={e: _const(None) for e in VLLM_LIKE},
        search=SearchRange(choices=(1, 2, 3), why="longer drafts accept less of each token"),
        requires="speculative_method",
    ),
    Knob(
        name="block_size",
        type="int",
        low=1,
        high=256,
        summary="tokens per KV-cache block (page)",
        planner=("kv_pool",),
        planner_note="the pool is a whole number of blocks; a request holds whole blocks",
        spellings={
            "trtllm": (
                Absent(
                    "TensorRT-LLM's tokens per KV block are its own (tokens_per_block of the build)"
                ),
            ),
            "vllm": (Spelling("--block-size"),),
            "vllm-cpu": (Spelling("--block-size"),),
            "sim": (Spelling("--block-size", choices=("1", "8", "16", "32", "64", "128")),),
            "sglang": (Spelling("--page-size"),),
            "tgi": (Absent("TGI's block size is fixed by its attention backend"),),
            "llama.cpp": (Absent("llama.cpp's KV cache is per token cell, not paged"),),
        },
        defaults={
            "vllm": (Default(value=16, rule="16 (the platform's; some backends pick larger)"),),
            "vllm-cpu": (Default(value=16, rule="the CPU platform's (16 or 128)"),),
            "sim": _const(16),
            "sglang": _const(1),
        },
        search=None,
    ),
    Knob(
        name="swap_space",
        type="float",
        low=0,
        summary="CPU memory (GiB per GPU) for swapped-out KV blocks (V0)",
        planner=("none",),
        planner_note="CPU memory only; the GPU pool is unchanged",
        spellings={
            "trtllm": (
                Absent(
                    "TensorRT-LLM has no KV swap space; host offload is "
                    "kv_cache_config.host_cache_size"
                ),
            ),
            "vllm": (
                Spelling(
                    "--swap-space",
                    until=V0_REMOVED,
                    note="used by V0 only; V1 preempts by recomputing",
                ),
                Absent(
                    "V1 preempts by recomputing and never swaps; the flag went with V0 (0.11.0)",
                    since=V0_REMOVED,
                ),
            ),
            "vllm-cpu": (Absent("V1 preempts by recomputing and never swaps"),),
            "sim": (Absent("the simulated engine is V1: it preempts by recomputing"),),
            "sglang": (Absent("SGLang retracts requests and recomputes; no swap space"),),
            "tgi": (Absent("TGI has no KV swap"),),
            "llama.cpp": (Absent("llama.cpp has no KV swap"),),
        },
        defaults={"vllm": _const(4.0)},
        search=None,
    ),
    Knob(
        name="enforce_eager",
        type="bool",
        summary="run without CUDA graphs (faster start, slower small steps)",
        planner=("cuda_graphs",),
        planner_note="no graph memory; steps are not padded to captured sizes",
        spellings={
            "trtllm": (
                Absent(
                    "trtllm-serve: CUDA graphs are the LLM-API option cuda_graph_config (null "
                    "turns them off)"
                ),
            ),
            "vllm": (Spelling("--enforce-eager", style="switch"),),
            "vllm-cpu": (
                Spelling(
                    "--enforce-eager",
                    style="switch",
                    note="the CPU build captures no CUDA graphs; it skips compilation",
                ),
            ),
            "sim": (
                Absent("the simulated engine always pads steps to vLLM's captured graph sizes"),
            ),
            "sglang": (Spelling("--disable-cuda-graph", style="switch"),),
            "tgi": (Absent("TGI: --cuda-graphs 0 turns CUDA graphs off"),),
            "llama.cpp": (
                Absent("llama.cpp: the environment GGML_CUDA_DISABLE_GRAPHS=1 turns them off"),
            ),
        },
        defaults={e: _const(False) for e in ("vllm", "vllm-cpu", "sglang")},
        search=None,
    ),
    Knob(
        name="cudagraph_capture_sizes",
        type="int_list",
        low=1,
        summary="batch sizes (tokens per step) captured as CUDA graphs",
        planner=("cuda_graphs",),
        planner_note="graph memory grows with the sizes; a step pads up to the next size",
        spellings={
            "trtllm": (
                Absent(
                    "trtllm-serve: the captured batch sizes are cuda_graph_config.batch_sizes of "
                    "the LLM API"
                ),
            ),
            "vllm": (
                Absent(
                    "before vLLM 0.9.0 the sizes were vLLM's own (bounded by "
                    "--max-seq-len-to-capture)",
                    until="0.9.0",
                ),
                Spelling(
                    "--cuda-graph-sizes", style="list", since="0.9.0", until=GRAPH_SIZES_RENAMED
                ),
                Spelling("--cudagraph-capture-sizes", style="list", since=GRAPH_SIZES_RENAMED),
            ),
            "vllm-cpu": (Absent("the CPU build captures no CUDA graphs"),),
            "sim": (
                Absent(
                    "the simulated engine captures vLLM's default sizes (1, 2, 4, 8, … up to "
                    "2 × max-num-seqs, at most 512)"
                ),
            ),
            "sglang": (Spelling("--cuda-graph-bs", style="list"),),
            "tgi": (Spelling("--cuda-graphs", style="csv"),),
            "llama.cpp": (Absent("llama.cpp captures its graphs itself"),),
        },
        defaults={
            "vllm": (
                Default(
                    rule="1, 2, 4, then multiples of 8 (16 from 256) up to "
                    "min(2 × max_num_seqs, 512)"
                ),
            ),
            "tgi": (Default(value=[1, 2, 4, 8, 16, 32]),),
        },
        search=None,
    ),
    Knob(
        name="max_cudagraph_capture_size",
        type="int",
        low=1,
        summary="the largest step (tokens) captured as a CUDA graph",
        planner=("cuda_graphs",),
        planner_note="graph memory grows with it",
        spellings={
            "trtllm": (
                Absent(
                    "trtllm-serve: the largest captured batch is cuda_graph_config.max_batch_size"
                ),
            ),
            "vllm": (
                Absent(
                    "before vLLM 0.11.1 the largest captured size is the largest of "
                    "--cuda-graph-sizes",
                    until=GRAPH_SIZES_RENAMED,
                ),
                Spelling("--max-cudagraph-capture-size", since=GRAPH_SIZES_RENAMED),
            ),
            "vllm-cpu": (Absent("the CPU build captures no CUDA graphs"),),
            "sim": (
                Spelling(
                    "--max-cudagraph-capture-size",
                    note="vLLM semantics: graphs of vLLM's sizes up to it (default min(2 × "
                    "max-num-seqs, 512)); SGLang semantics: --cuda-graph-max-bs",
                ),
            ),
            "sglang": (
                Spelling("--cuda-graph-max-bs", until=SGLANG_GRAPH_FLAGS_SPLIT),
                Spelling(
                    "--cuda-graph-max-bs-decode",
                    since=SGLANG_GRAPH_FLAGS_SPLIT,
                    note="decode graphs; prefill graphs have --cuda-graph-max-bs-prefill",
                ),
            ),
            "tgi": (Absent("TGI: the largest of --cuda-graphs"),),
            "llama.cpp": (Absent("llama.cpp captures its graphs itself"),),
        },
        defaults={"vllm": (Default(rule="min(2 × max_num_seqs, 512)"),)},
        search=None,
    ),
    Knob(
        name="scheduling_policy",
        type="choice",
        choices=("fcfs", "priority", "lpm"),
        summary="the order waiting requests are admitted in",
        planner=("none",),
        planner_note="scheduling only",
        spellings={
            "trtllm": (
                Absent(
                    "TensorRT-LLM's capacity scheduler policy is not a scheduling order of waiting "
                    "requests"
                ),
            ),
            "vllm": (Spelling("--scheduling-policy", choices=("fcfs", "priority")),),
            "vllm-cpu": (Spelling("--scheduling-policy", choices=("fcfs", "priority")),),
            "sim": (Absent("the simulated engine admits first come, first served"),),
            "sglang": (
                Spelling(
                    "--schedule-policy",
                    choices=("lpm", "random", "fcfs", "dfs-weight", "lof"),
                    note="lpm (longest prefix match) favours cache hits",
                ),
            ),
            "tgi": (Absent("TGI admits first come, first served"),),
            "llama.cpp": (Absent("llama.cpp gives requests to free slots in arrival order"),),
        },
        defaults={"vllm": _const("fcfs"), "vllm-cpu": _const("fcfs"), "sglang": _const("fcfs")},
        search=None,
    ),
    Knob(
        name="ubatch_size",
        type="int",
        low=1,
        summary="llama.cpp's physical micro-batch (-ub): tokens computed at once",
        planner=("activation_peak",),
        planner_note="the compute buffer grows with it",
        spellings={
            "trtllm": (Absent("no micro-batch setting"),),
            **{
                e: (Absent("no micro-batch: a step computes max-num-batched-tokens at once"),)
                for e in VLLM_LIKE
            },
            "sglang": (Absent("no micro-batch setting"),),
            "tgi": (Absent("no micro-batch setting"),),
            "llama.cpp": (Spelling("-ub", aliases=("--ubatch-size",)),),
        },
        defaults={"llama.cpp": _const(512)},
        search=SearchRange(low=128, high=2048, log=True),
        requires="≤ max_num_batched_tokens (llama.cpp -ub ≤ -b)",
    ),
    Knob(
        name="threads",
        type="int",
        low=1,
        summary="CPU threads for computation",
        planner=("none",),
        planner_note="speed only",
        spellings={
            "trtllm": (Absent("the GPU engine computes on the GPU"),),
            "vllm": (Absent("the GPU build computes on the GPU"),),
            "vllm-cpu": (
                Spelling(
                    "OMP_NUM_THREADS",
                    env="OMP_NUM_THREADS",
                    note="the CPU build's OpenMP threads (an environment variable)",
                ),
            ),
            "sim": (Absent("the simulated engine computes nothing"),),
            "sglang": (Absent("the GPU engine computes on the GPU"),),
            "tgi": (Absent("the GPU engine computes on the GPU"),),
            "llama.cpp": (Spelling("-t", aliases=("--threads",)),),
        },
        defaults={"llama.cpp": (Default(rule="the machine's cores"),)},
        search=SearchRange(low=1, high=64, log=True, why="bounded by the cores you have"),
    ),
    Knob(
        name="flash_attn",
        type="bool",
        nullable=True,
        summary="llama.cpp's flash attention (None: auto)",
        planner=("activation_peak",),
        planner_note="a smaller attention buffer; required for a quantized V cache",
        spellings={
            "trtllm": (
                Absent("TensorRT-LLM picks its attention backend (attn_backend of the LLM API)"),
            ),
            **{
                e: (
                    Absent(
                        "vLLM picks its attention backend itself (--attention-backend "
                        "chooses another)"
                    ),
                )
                for e in VLLM_LIKE
            },
            "sglang": (Absent("SGLang picks its attention backend (--attention-backend)"),),
            "tgi": (Absent("TGI picks its attention backend (ATTENTION environment)"),),
            "llama.cpp": (
                Spelling(
                    "-fa", style="switch", aliases=("--flash-attn",), until=LLAMA_FA_VALUE_SINCE
                ),
                Spelling(
                    "-fa",
                    style="bool_value",
                    words=("on", "off"),
                    aliases=("--flash-attn",),
                    since=LLAMA_FA_VALUE_SINCE,
                ),
            ),
        },
        defaults={
            "llama.cpp": (
                Default(value=False, until=LLAMA_FA_VALUE_SINCE),
                Default(value=None, rule="auto"),
            )
        },
        search=SearchRange(choices=(True, False)),
    ),
    Knob(
        name="chunked_prefill_size",
        type="int",
        low=-1,
        summary="tokens of one prefill chunk (SGLang; -1 turns chunked prefill off)",
        planner=("activation_peak",),
        planner_note="SGLang's default mem_fraction_static reserves activation memory for "
        "one chunk (1.5 MB a token); a prompt longer than it is prefilled over several steps",
        spellings={
            **_vllm(
                Absent(
                    "vLLM's prefill chunk is the step's token budget, --max-num-batched-tokens "
                    "(--long-prefill-token-threshold caps one request's share)"
                )
            ),
            "sim": (Spelling("--chunked-prefill-size", note=SIM_SGLANG_ONLY),),
            "sglang": (Spelling("--chunked-prefill-size"),),
            "tgi": (Absent("TGI chunks prefills itself; there is no chunk size flag"),),
            "trtllm": (
                Absent(
                    "TensorRT-LLM chunks within --max_num_tokens (enable_chunked_prefill in "
                    "the side file); there is no separate chunk size"
                ),
            ),
            "llama.cpp": (Absent("llama.cpp prefills in -ub micro-batches"),),
        },
        defaults={
            "sglang": (
                Default(
                    rule="by GPU memory: 2048 below 25 GB (0.4) / 35 GB (0.5), 4096 below 60 GB, "
                    "8192 to 160 GB, 16384 above; divided by --dp with DP attention "
                    "(servetune.arch.memory_sglang)"
                ),
            ),
        },
        search=None,
        requires="a multiple of --page-size (SGLang)",
    ),
    Knob(
        name="schedule_conservativeness",
        type="float",
        low=0.0,
        summary="SGLang's admission margin: the share of each running request's remaining "
        "output reserved in the pool (× the decaying new-token ratio)",
        planner=("none",),
        planner_note="scheduling only: higher admits fewer requests at once and retracts less",
        spellings={
            **_vllm(
                Absent(
                    "vLLM admits a request when its prompt's blocks fit and preempts when a "
                    "decode needs a block; it reserves nothing for future tokens"
                )
            ),
            "sim": (Spelling("--schedule-conservativeness", note=SIM_SGLANG_ONLY),),
            "sglang": (Spelling("--schedule-conservativeness"),),
            "tgi": (Absent("TGI's router admits by --max-batch-total-tokens"),),
            "trtllm": (
                Absent("TensorRT-LLM's capacity scheduler admits by its own policy (side file)"),
            ),
            "llama.cpp": (Absent("llama.cpp gives each slot its own -c / -np context"),),
        },
        defaults={"sglang": _const(1.0), "sim": _const(1.0)},
        search=None,
    ),
)
