"""The simulated engine: a vLLM-like server and capacity planner that needs no GPU.

``catalog`` (GPUs, models, calibration), ``config`` (EngineConfig with vLLM's knob names and
V1 defaults), ``memory`` (the start-up memory plan), ``perf`` (step time), ``kv`` (block pool
with prefix caching), ``engine`` (the V1-style scheduler on a clock), ``offline`` (a whole run
on a virtual clock), ``server`` / ``embedded`` (the real-time OpenAI-compatible server).
"""
