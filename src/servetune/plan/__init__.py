"""Plan: which GPUs, how many, and which engine knobs hold a target traffic at its SLOs, for
the least money — found on the simulated engine.

``workload`` (the traffic's request lengths), ``simulate`` (one configuration at one rate, the
adapter to the simulated engine), ``capacity`` (a configuration's SLO-max rate per replica and
its saturated throughput), ``space`` (the candidate deployments), ``request`` (what a plan is
asked), ``search`` (all of them, ranked by $/hour), ``workers`` (what its worker processes
run), ``pricing`` (replicas, $/hour, the ranking), ``confirmation`` (the rows shown, on
independent draws), ``notes`` (what a row serves), ``fleet`` (with ``--router``: the fewest
replicas whose whole fleet, simulated behind the router, holds the peak). Entry point::

    search.make_plan(request.PlanRequest(...)) -> PlanResult
"""
