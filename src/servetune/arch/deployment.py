"""What the memory planner and the step model need to know of a deployment: the model, the
GPU, the parallel layout, the formats and the engine's sizing knobs. The simulated engine's
resolved configuration (:class:`servetune.sim.resolved.ResolvedConfig`) is one."""

from __future__ import annotations

from typing import Protocol

from servetune.arch.architecture import Architecture
from servetune.arch.gpus import GpuSpec
from servetune.arch.parallel import Parallelism

GIB = 1024**3


class Deployment(Protocol):
    @property
    def model(self) -> Architecture: ...
    @property
    def gpu(self) -> GpuSpec: ...
    @property
    def parallelism(self) -> Parallelism: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def quantization(self) -> str | None: ...
    @property
    def kv_dtype_bytes(self) -> float: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def gpu_memory_utilization(self) -> float: ...
