"""Failure recognition on the lines real engines print (captured from the runs noted)."""

from __future__ import annotations

import pytest

from servetune.engines.failures import MAX_QUOTE, last_error_line, recognise

# vLLM 0.32 CPU build, --max-model-len 4096 on a 2048-position model.
VLLM_MAX_LEN = (
    "  Value error, User-specified max_model_len (4096) is greater than the derived "
    "max_model_len (max_position_embeddings=2048.0 or model_max_length=None in model's "
    "config.json). To allow overriding this maximum, set the env var "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
)
# vLLM 0.32 CPU build, a 1 MiB KV pool.
VLLM_KV = (
    "(EngineCore pid=10068) ERROR 12-02 15:58:09 [core.py:1510] ValueError: To serve at least "
    "one request with the model's max seq len (2048), (0.0 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (0.0 GiB). Based on the available memory, the "
    "estimated maximum model length is 384."
)
VLLM_FLAG = "api_server.py: error: unrecognized arguments: --no-such-flag"
LLAMA_FLAG = "error: invalid argument: --no-such-flag"
LLAMA_BAD_MODEL = (
    "0.00.028.712 E llama_model_load: error loading model: llama_model_loader: failed to load "
    "model from /tmp/st/bad.gguf"
)
LLAMA_PRE = (
    "0.00.012.575 E llama_model_load: error loading model: error loading model vocabulary: "
    "unknown pre-tokenizer type: 'gpt2'"
)
SIM_OOM = (
    "servetune sim: error: CUDA out of memory while loading the model: the weights of "
    "meta-llama/Llama-3.1-70B-Instruct need 131.48 GiB per GPU on A10G (22 GiB, TP=1)."
)
NOISE = [
    "(APIServer pid=9438) INFO 12-02 15:56:39 [api_server.py:1] vLLM API server version 0.32.0",
    "WARNING [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase",
    "0.00.020.311 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 1024",
]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (VLLM_MAX_LEN, "max_model_len_too_large"),
        (VLLM_KV, "kv_cache_too_small"),
        (VLLM_FLAG, "unknown_argument"),
        (LLAMA_FLAG, "unknown_argument"),
        (LLAMA_BAD_MODEL, "model_not_loadable"),
        (LLAMA_PRE, "model_not_loadable"),
        (SIM_OOM, "out_of_memory"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
        (
            "OSError: [Errno 98] error while attempting to bind on address: address already in use",
            "port_in_use",
        ),
    ],
)
def test_recognises_real_lines(line: str, kind: str) -> None:
    found = recognise([*NOISE, line, *NOISE])
    assert found is not None and found.kind == kind
    assert found.line == line.strip()[:MAX_QUOTE] or found.line.endswith("…")
    assert found.hint


def test_the_specific_cause_wins_over_the_generic() -> None:
    # vLLM's KV message also says "memory"; the KV-cache pattern outranks out-of-memory.
    found = recognise(["RuntimeError: Engine core initialization failed. out of memory?", VLLM_KV])
    assert found is not None and found.kind == "kv_cache_too_small"


def test_normal_start_up_is_not_a_failure() -> None:
    assert recognise(NOISE) is None


def test_long_lines_are_clipped() -> None:
    found = recognise(["x" * 2000 + " unrecognized arguments: --y"])
    assert found is not None and len(found.line) == MAX_QUOTE and found.line.endswith("…")


def test_last_error_line_falls_back_to_the_last_line() -> None:
    assert last_error_line(["a", "Traceback: boom failed", "b"]) == "Traceback: boom failed"
    assert last_error_line(["a", "b", ""]) == "b"
    assert last_error_line([]) is None
