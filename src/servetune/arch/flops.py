"""FLOPs of a model's tokens, and the peak a deployment multiplies at.

What diagnose's compute ceiling, watch's utilisation estimate and the simulator's step model
all count (:class:`ModelFlops`): 2 × the matrix-multiplication weights a token goes through
(top-k experts for a MoE layer), 2 × the lm_head per sampled token, and the attention's
FLOPs per token of context attended to, split by the window each kind of layer attends over.
"""

from __future__ import annotations

from dataclasses import dataclass

from servetune.arch.architecture import Architecture
from servetune.arch.gpus import GpuSpec
from servetune.arch.precision import linear_rate


def windowed_mean(input_len: float, output_len: float, window: int | None) -> tuple[float, float]:
    """(mean context a prompt token attends to, mean context a generated token attends to)
    when a layer attends over at most ``window`` tokens (None: all of them)."""
    prompt = input_len / 2
    gen = input_len + output_len / 2
    if window is None:
        return prompt, gen
    return min(prompt, window), min(gen, window)


@dataclass(frozen=True)
class ModelFlops:
    """FLOPs of the whole model (all GPUs together): ``linear`` per token computed,
    ``head`` per token sampled, and per attention kind the FLOPs per token of context of a
    prompt token and of a generated token, with the window that kind attends over
    (``attention``: (prefill flops per ctx token, decode flops per ctx token, window))."""

    linear: float
    head: float
    attention: tuple[tuple[float, float, int | None], ...]

    @property
    def attention_per_ctx(self) -> float:
        """Decode attention FLOPs per context token, every layer counted (no window)."""
        return sum(f for _, f, _ in self.attention)

    def per_token(self, input_len: float, output_len: float) -> tuple[float, float]:
        """(FLOPs per prompt token, FLOPs per generated token) of a request of these lengths:
        a prompt token attends to half the prompt on average (causal), a generated token to
        the prompt and half the output, each kind of layer within its window; a generated
        token samples once."""
        prompt = self.linear
        gen = self.linear + self.head
        for fp, fd, window in self.attention:
            p, g = windowed_mean(input_len, output_len, window)
            prompt += fp * p
            gen += fd * g
        return prompt, gen


def model_flops(m: Architecture) -> ModelFlops:
    """The FLOP counts of model M (MLA's attention costs differ between its absorbed decode
    and its prefill)."""
    prefill = m.attention_flops_per_ctx(decode=False)
    decode = m.attention_flops_per_ctx(decode=True)
    windows = m.window_of
    return ModelFlops(
        linear=2.0 * m.active_linear_params,
        head=2.0 * m.hidden_size * m.vocab_size,
        attention=tuple((prefill[k], decode[k], windows[k]) for k in decode if decode[k]),
    )


def peak_flops(gpu: GpuSpec, quantization: str | None, tp: int = 1) -> float:
    """Dense peak FLOP/s of ``tp`` such GPUs for matrix multiplications of weights in this
    format (:func:`servetune.arch.precision.linear_rate`)."""
    return linear_rate(gpu, quantization)[0] * tp
