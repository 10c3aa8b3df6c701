"""A sweep diagnosed: per level and across them (``diagnose``), around the knee (``knee``),
the levels (``levels``), what bounds the SLO-max (``limit``)."""

__all__: list[str] = []
