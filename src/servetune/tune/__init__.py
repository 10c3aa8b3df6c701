"""``servetune tune``: the engine configuration that serves the most traffic within latency
SLOs, found by a search over the knob registry's space, measured with repeats."""
