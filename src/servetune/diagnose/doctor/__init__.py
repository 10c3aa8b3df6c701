"""The config doctor: a server's command line checked before launch against the memory
planner (``check``), its figures (``figures``), its rules (``rules``), the fix when the engine
would refuse to start (``refusal``)."""

__all__: list[str] = []
