"""Routing policies: which upstream (or simulated replica) serves a request.

Pure policy code, no I/O, written once and used by the gateway's pools
(:mod:`servetune.gateway.pool`) and by the simulator's replicas
(:mod:`servetune.sim.replicas`): :mod:`~servetune.routing.keys` (a request's session key and
the block hashes of its prompt), :mod:`~servetune.routing.rendezvous` (highest-random-weight
hashing: replicas that share no state agree), :mod:`~servetune.routing.prefix_index` (an
approximate per-upstream prefix index, LRU, bounded by the upstream's KV pool),
:mod:`~servetune.routing.config` (the pydantic model of a group's ``routing:``) and
:mod:`~servetune.routing.policies` (least-loaded, round-robin, session, prefix, score).
"""
