"""Quality: does a candidate endpoint (a quantized model, another dtype) still answer like its
baseline? Measured against the baseline's own run-to-run noise.

``inputs`` (texts and business samples), ``endpoint`` (what an OpenAI-compatible server gives:
prompt logprobs by ``echo`` or token by token, greedy outputs), ``compare`` (perplexity, KL
divergence, top-1 agreement, greedy agreement, sample checks), ``verdict`` (excess over the
noise floor with 95% intervals against thresholds), ``run`` (the whole check).
"""
