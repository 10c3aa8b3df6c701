"""Precision rules: what a weight format costs in bytes, and at what rate a GPU multiplies it.

A weight format (``--quantization``) is stored at :attr:`WeightFormat.bytes_per_param`
(the scales included) and multiplied either natively by the tensor cores in a low precision
(FP8 on Hopper, Ada, Blackwell and CDNA3/4; FP4 on Blackwell and CDNA4) or by a weight-only
kernel that dequantizes to BF16 on the fly (Marlin, or Triton's MXFP4 kernels on Hopper and
MI300X): memory traffic of the small format, compute at the BF16 rate — the same assumption
the AWQ/GPTQ kernels always had here; the calibrated compute efficiency of the GPU absorbs
what the dequantization costs. :func:`linear_rate` gives the peak a step's matrix
multiplications run at; attention always runs in BF16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servetune.arch.gpus import GpuSpec

Native = Literal["bf16", "fp8", "fp4"]


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bytes_per_param: float
    """Storage per weight, scales included."""
    native: Native
    """The tensor-core precision that multiplies it where the GPU has it."""
    source: str


FORMATS: dict[str | None, WeightFormat] = {
    f.name if f.name != "bf16" else None: f
    for f in (
        WeightFormat("bf16", 2.0, "bf16", "16-bit weights"),
        WeightFormat(
            "fp8",
            1.0,
            "fp8",
            "one byte per weight; per-channel or 128x128-block scales add < 0.1%",
        ),
        WeightFormat(
            "awq",
            0.5 + 4.0 / 128,
            "bf16",
            "4-bit weights plus an fp16 scale and zero per group of 128; weight-only kernels",
        ),
        WeightFormat(
            "gptq",
            0.5 + 4.0 / 128,
            "bf16",
            "4-bit weights plus an fp16 scale and zero per group of 128; weight-only kernels",
        ),
        WeightFormat(
            "mxfp4",
            0.5 + 1.0 / 32,
            "bf16",
            "OCP MX: 4-bit E2M1 weights plus one E8M0 scale byte per 32; multiplied with 16-bit "
            "activations by default in vLLM on every GPU (Triton matmul_ogs on Hopper and "
            "MI300X, FlashInfer's MXFP4 x BF16 MoE on Blackwell; MXFP4 x MXFP8 is opt-in)",
        ),
        WeightFormat(
            "nvfp4",
            0.5 + 1.0 / 16,
            "fp4",
            "NVIDIA NVFP4: 4-bit E2M1 weights plus one FP8 scale per 16 (and a per-tensor FP32)",
        ),
    )
}
"""``--quantization`` value (None: 16-bit weights) → its format."""

ALIASES: dict[str, str] = {
    "awq_marlin": "awq",
    "gptq_marlin": "gptq",
    "modelopt_fp4": "nvfp4",
    "fp8_e4m3": "fp8",
}
"""Engines' kernel- or vendor-named methods → the weight format they load."""


def weight_format(quantization: str | None) -> WeightFormat:
    """The format of ``--quantization`` (None: 16-bit weights); a KeyError for one the
    catalog does not know (the knob registry's choices are checked before)."""
    return FORMATS[ALIASES.get(quantization, quantization) if quantization else None]


def runs_natively(gpu: GpuSpec, native: Native) -> bool:
    """Does the GPU's tensor core multiply this precision (a dense peak in the catalog)?"""
    if native == "bf16":
        return True
    if native == "fp8":
        return gpu.fp8_tflops is not None
    return gpu.fp4_tflops is not None


def linear_rate(gpu: GpuSpec, quantization: str | None) -> tuple[float, bool]:
    """(peak FLOP/s of the matrix multiplications, native?) for weights of this format: the
    format's own precision where the GPU has it; else BF16 through a weight-only kernel at
    the BF16 peak (FP4 on Hopper falls back to BF16, not FP8: vLLM's MXFP4 and NVFP4 kernels
    on Hopper are weight-only)."""
    fmt = weight_format(quantization)
    if fmt.native == "fp8" and gpu.fp8_tflops is not None:
        return gpu.fp8_tflops * 1e12, True
    if fmt.native == "fp4" and gpu.fp4_tflops is not None:
        return gpu.fp4_tflops * 1e12, True
    return gpu.bf16_tflops * 1e12, fmt.native == "bf16"


def requantized(checkpoint: str | None, quantization: str | None) -> bool:
    """Are the served weights in another format than the checkpoint was published in (the
    case for a quality check against the original)? gpt-oss served as MXFP4 is not."""
    if quantization is None:
        return False
    return weight_format(quantization).name != checkpoint


def kv_dtype_bytes(kv_cache_dtype: str) -> float:
    """Bytes per KV element: 1 for the fp8 formats, 2 for auto/bf16/fp16."""
    return 1.0 if kv_cache_dtype.startswith("fp8") else 2.0


@dataclass(frozen=True)
class Mxfp4MoeLayout:
    """How vLLM lays MXFP4 experts out in memory on a GPU (``Mxfp4MoEMethod.create_weights``,
    vllm/model_executor/layers/quantization/mxfp4.py): the kernel it runs pads each expert's
    intermediate width (per tensor-parallel rank) and the hidden width to its tile. Marlin
    (the weight-only FP4 kernel) needs ``n % 256 == 0`` and ``k % 128 == 0`` of each GEMM,
    so the intermediate width is padded to 128 and the hidden width to 256; FlashInfer's
    SM100 kernels pad both to 256; ROCm's Triton kernels to 128 (256 on gfx950)."""

    kernel: str
    intermediate_align: int
    hidden_align: int


HopperMxfp4Kernel = Literal["marlin", "triton"]


def mxfp4_moe_layout(gpu: GpuSpec, hopper: HopperMxfp4Kernel = "marlin") -> Mxfp4MoeLayout:
    """The MXFP4 expert layout of the kernel vLLM runs on this GPU. Blackwell: FlashInfer's
    MXFP4 x BF16; CDNA3/CDNA4: ROCm Triton; Ampere and Ada: Marlin ("Your GPU does not have
    native support for FP4 computation ... Weight-only FP4 compression will be used
    leveraging the Marlin kernel", vLLM #23278 on an H100). Hopper runs what the
    installation has (``hopper``): vLLM's backend choice (``get_mxfp4_backend`` in
    quantization/mxfp4.py) takes OpenAI's Triton ``matmul_ogs`` kernels where the
    ``triton_kernels`` package imports and torch is 2.8 or newer, else Marlin. The Triton
    path pads the intermediate width to 64 only, but its swizzled Hopper value layout holds
    the hidden width at 256 (inferred: vLLM 0.11.0's image logged 13.47 GiB for gpt-oss-20b
    and 64.38 GiB for gpt-oss-120b on one H100 — as did vLLM #33155's 0.14.1 "Using Triton
    backend" log — and (64, 256) gives 13.48 / 64.59; Marlin's (128, 256) gives the 13.64 /
    65.97 GiB of the Marlin logs)."""
    if gpu.generation == "hopper" and hopper == "triton":
        return Mxfp4MoeLayout("triton matmul_ogs (hopper swizzle)", 64, 256)
    if gpu.generation == "blackwell":
        return Mxfp4MoeLayout("flashinfer sm100 mxfp4 x bf16", 256, 256)
    if gpu.generation == "cdna4":
        return Mxfp4MoeLayout("rocm triton (gfx950)", 256, 256)
    if gpu.generation == "cdna3":
        return Mxfp4MoeLayout("rocm triton", 128, 128)
    return Mxfp4MoeLayout("marlin", 128, 256)
