"""Cost: what a served token costs, from list prices and measured (or simulated) throughput.

``prices`` (the price catalog and ``--price`` overrides), ``formula`` (the $/Mtok formula,
written once), ``analyze`` (a run's or a sweep's cost at each level, at the knee and at
saturation). Entry point::

    cost_of(RUN_OR_SWEEP_DIR, prices=PriceBook(...)) -> CostReport
"""
