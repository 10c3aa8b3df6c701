"""The figures that come from the engine's configuration (its knobs, from the configuration
known for the run: :mod:`servetune.diagnose.knobs`), and those derived from the knobs and the
measured figures (batch fill, requests the KV pool holds, the compute load). A cap the
configuration does not give is unknown, never read off what a run happened to reach.
"""

from __future__ import annotations

from servetune.arch.precision import requantized
from servetune.diagnose.figures.table import Figures
from servetune.errors import ServetuneError
from servetune.results.schema import RunResult

MODEL_GPU_MISSING = (
    "the GPU and the model are unknown, so the compute load cannot be estimated "
    '(pass --gpu and --model, or --server-cmd "vllm serve MODEL …" --gpu GPU)'
)


NUMERIC_KNOB_FIGURES = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "long_prefill_token_threshold",
)
KNOB_FIGURES = (*NUMERIC_KNOB_FIGURES, "enable_chunked_prefill", "quantized", "kv_fp8")
"""The figures that come from the engine's configuration, not from what it measured."""


def _checkpoint_format(model: str | None) -> str | None:
    """The weights' format the model was published in, where the catalog knows the model."""
    if not model:
        return None
    from servetune.arch.models import find_model

    try:
        return find_model(model).checkpoint_quantization
    except ServetuneError:
        return None


def knob_figures(fig: Figures, run: RunResult) -> None:
    cfg = fig.config
    why = (
        'the engine configuration is unknown (pass --server-cmd "vllm serve MODEL …" with the '
        "flags the server was started with)"
    )
    for knob in NUMERIC_KNOB_FIGURES:
        fig.put(knob, cfg.number(knob), why)
    chunked = cfg.get("enable_chunked_prefill")
    fig.put("enable_chunked_prefill", chunked if isinstance(chunked, bool) else None, why)
    if "quantization" in cfg.values:
        quant = cfg.get("quantization")
        own = _checkpoint_format(cfg.model)
        fig.put("quantized", requantized(own, quant if isinstance(quant, str) else None))
    else:
        fig.miss("quantized", why)
    if "kv_cache_dtype" in cfg.values:
        dtype = cfg.get("kv_cache_dtype")
        fig.put("kv_fp8", isinstance(dtype, str) and dtype.startswith("fp8"))
    else:
        fig.miss("kv_fp8", why)
    pool = cfg.kv_pool_tokens
    if pool is None and run.server is not None:
        # what the server itself says (vLLM's cache_config_info, read by the scraper): no
        # --server-cmd or GPU needed for a real server's pool
        tokens = run.server.summary.get("kv_cache_tokens")
        if isinstance(tokens, int | float) and not isinstance(tokens, bool) and tokens > 0:
            pool = int(tokens)
    fig.put("kv_pool_tokens", pool, "the KV pool size is unknown (the server does not say)")


def derived_figures(fig: Figures, run: RunResult) -> None:
    seqs = fig.get("max_num_seqs")
    running = fig.get("running_mean")
    if seqs and running is not None:
        fig.put("batch_fill", running / seqs)
    per_req = fig.get("tokens_per_request")
    pool = fig.get("kv_pool_tokens")
    if pool and per_req:
        fig.put("pool_requests", pool / per_req)
        fig.texts["pool_requests_how"] = "KV pool ÷ mean request size"
    elif running and fig.get("kv_mean"):
        kv = fig.get("kv_mean") or 0.0
        if kv > 0.01:
            fig.put("pool_requests", running / kv)
            fig.texts["pool_requests_how"] = "≈ mean running ÷ mean KV use"
    # compute load estimate
    cfg = fig.config
    if not (cfg.gpu and cfg.model):
        fig.miss("compute_use_est", MODEL_GPU_MISSING)
        return
    from servetune.arch.gpus import find_gpu
    from servetune.arch.models import find_model

    try:
        gpu = find_gpu(cfg.gpu)
        model = find_model(cfg.model)
    except ServetuneError as exc:
        fig.miss("compute_use_est", f"cannot estimate the compute load: {exc.message}")
        return
    s = run.summary
    if s.duration_s <= 0 or s.completed == 0:
        fig.miss("compute_use_est", "no completed request to count tokens from")
        return
    from servetune.arch.flops import model_flops, peak_flops
    from servetune.sim.efficiency import efficiency

    in_len = fig.get("input_len_p50") or 0.0
    out_len = fig.get("output_len_mean") or 0.0
    p_rate = fig.get("server_prompt_tokens_per_s")
    g_rate = fig.get("server_generation_tokens_per_s")
    if p_rate is None:
        p_rate = s.total_input_tokens / s.duration_s
    if g_rate is None:
        g_rate = s.output_throughput
    fp, fg = model_flops(model).per_token(in_len, out_len)
    tp = int(cfg.number("tensor_parallel_size") or 1)
    quant = cfg.get("quantization")
    peak = peak_flops(gpu, quant if isinstance(quant, str) else None, tp)
    fp8 = quant == "fp8" and gpu.fp8_tflops is not None
    est = (p_rate * fp + g_rate * fg) / peak
    fig.put("compute_use_est", est)
    ceiling = efficiency(gpu).mfu
    fig.put("compute_ceiling", ceiling)
    if ceiling > 0:
        fig.put("compute_of_ceiling", est / ceiling)
    fig.texts["compute_peak"] = (
        f"{peak / 1e12:.0f} TFLOP/s ({'fp8' if fp8 else 'bf16'} peak of {tp}× {gpu.name})"
    )
