"""How many connections a server can hold open with the file descriptors it may have.

A connection costs a descriptor (a proxy: two — the client's and the upstream's). Past the
process's ``RLIMIT_NOFILE`` ``accept`` fails with EMFILE: the new connection is reset in the
kernel's queue, legitimate or not, and so is anything else that needs a descriptor (an upstream
connection, a log file). So a connection cap must fit the limit: :func:`fit_connections` raises
the soft limit towards the hard one when the cap needs it, and lowers the cap to what fits when
it cannot.
"""

from __future__ import annotations

import resource

RESERVE = 64
"""Descriptors kept for everything that is not a connection (listening sockets, the event
loop, log and audit files, a Redis connection, metrics reads)."""


def descriptor_limit() -> tuple[int, int]:
    """(soft, hard) ``RLIMIT_NOFILE``; ``-1`` for unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    return (-1 if soft == inf else soft), (-1 if hard == inf else hard)


def fit_connections(wanted: int, per_connection: int = 1, reserve: int = RESERVE) -> int:
    """The connection cap to use for ``wanted`` (each costing ``per_connection`` descriptors):
    ``wanted`` when the soft limit allows it (raised up to the hard limit if need be), else what
    the limit leaves after ``reserve`` (at least 1)."""
    need = wanted * per_connection + reserve
    soft, hard = descriptor_limit()
    if soft != -1 and soft < need:
        target = need if hard == -1 else min(need, hard)
        if target > soft:
            try:
                resource.setrlimit(
                    resource.RLIMIT_NOFILE, (target, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
                )
                soft = target
            except (ValueError, OSError):
                pass
    if soft == -1 or soft >= need:
        return wanted
    return max(1, min(wanted, (soft - reserve) // per_connection))
