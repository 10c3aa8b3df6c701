"""servetune: load-test, understand and tune LLM inference servers."""

__version__ = "0.1.0"
