"""Start-failure patterns every engine's log may show; an engine's own come first (its
profile's ``failures``). The first pattern, in order — the specific before the generic — that
matches a line wins. Taken from the engines' own messages (vLLM's config and KV-cache checks,
argparse, click, clap, llama.cpp's loader and server).
"""

from __future__ import annotations

from servetune.profiles.model import FailurePattern, failure

COMMON: tuple[FailurePattern, ...] = (
    failure(
        "max_model_len_too_large",
        r"max_model_len.*(greater than|exceeds|larger than).*(derived|max_position|model)",
        "lower max_model_len to what the model supports",
    ),
    failure(
        "kv_cache_too_small",
        r"(larger than the available KV cache memory|KV cache is needed"
        r"|No available memory for the cache blocks|insufficient .*KV cache"
        r"|not enough KV cache|estimated maximum model length is"
        r"|VLLM_CPU_KVCACHE_SPACE.*(too small|not enough|insufficient))",
        "lower max_model_len, or give the KV cache more memory (gpu_memory_utilization; "
        "on vLLM's CPU build the engine option cpu_kv_cache_gib)",
    ),
    failure(
        "out_of_memory",
        r"(out of memory|OutOfMemoryError|failed to allocate|cannot allocate memory"
        r"|std::bad_alloc|unable to allocate)",
        "the engine ran out of memory: lower max_num_seqs, max_model_len or "
        "max_num_batched_tokens, or use a smaller / quantized model",
    ),
    failure(
        "unknown_argument",
        r"(unrecognized arguments?:|invalid argument:|unexpected argument|unknown argument"
        r"|no such option|error: argument [^ ]+: )",
        "the engine does not accept a flag: check its version and the extra arguments",
    ),
    failure(
        "port_in_use",
        r"(address already in use|couldn't bind HTTP server socket|failed to bind)",
        "the port is taken: choose another, or let servetune pick a free one",
    ),
    failure(
        "model_not_loadable",
        r"(failed to load model|error loading model|unable to load model"
        r"|is not a valid model|Can't load the (model|configuration)"
        r"|No such file or directory.*(config\.json|\.gguf|\.safetensors)"
        r"|does not appear to have a file named)",
        "check the model path and that its format suits the engine (HF folder or GGUF)",
    ),
    failure(
        "servetune_error",
        r"^servetune [a-z-]+( [a-z-]+)?: error: ",
        "see the simulated engine's message",
    ),
)
