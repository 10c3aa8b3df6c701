"""Diagnose's figures: their names and units (``table``), the client's (``client``), the
server's (``server``), the configuration's (``config``)."""

__all__: list[str] = []
