"""Actions: the table of what to change for each finding (``table``), the targets a change
aims at (``targets``), an action built for a run's figures (``build``)."""

__all__: list[str] = []
