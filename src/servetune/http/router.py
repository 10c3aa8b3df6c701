"""A small router: (method, path) → handler, longest prefix next, 404 / 405 otherwise.

::

    router = Router()
    router.get("/health", health)
    router.post("/v1/completions", generate)
    router.prefix("/v1/", proxy)                  # anything else under /v1/, any method
    server = HTTPServer(router)

Paths are matched without the query and without a trailing slash (``/v1/models/`` is
``/v1/models``). A path that is routed for other methods answers 405 with an ``Allow`` header;
an unknown path 404, in the server's error body format.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable

from servetune.http.exchange import Exchange, Handler


class Router:
    """Routes an :class:`Exchange` to its handler; itself a handler."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Handler]] = {}
        self._prefixes: list[tuple[str, frozenset[str] | None, Handler]] = []

    def add(self, methods: str | Iterable[str], path: str, handler: Handler) -> None:
        names = [methods] if isinstance(methods, str) else list(methods)
        routes = self._exact.setdefault(_norm(path), {})
        for m in names:
            routes[m.upper()] = handler

    def get(self, path: str, handler: Handler) -> None:
        self.add("GET", path, handler)

    def post(self, path: str, handler: Handler) -> None:
        self.add("POST", path, handler)

    def prefix(self, prefix: str, handler: Handler, methods: Iterable[str] | None = None) -> None:
        """Every path starting with ``prefix`` not routed exactly (longest prefix first)."""
        allowed = frozenset(m.upper() for m in methods) if methods is not None else None
        self._prefixes.append((prefix, allowed, handler))
        self._prefixes.sort(key=lambda p: -len(p[0]))

    def resolve(self, method: str, path: str) -> Handler | tuple[int, list[str]]:
        """The handler, or (404 / 405, the allowed methods)."""
        path = _norm(path)
        routes = self._exact.get(path)
        if routes is not None:
            h = routes.get(method)
            return h if h is not None else (405, sorted(routes))
        allowed: set[str] = set()
        for prefix, methods, handler in self._prefixes:
            if path.startswith(prefix) or path + "/" == prefix:
                if methods is None or method in methods:
                    return handler
                allowed |= methods
        return (405, sorted(allowed)) if allowed else (404, [])

    def __call__(self, ex: Exchange) -> Awaitable[None] | None:
        found = self.resolve(ex.method, ex.path)
        if isinstance(found, tuple):
            status, allowed = found
            if status == 405:
                body = ex.conn.server.error_body(405, f"Method Not Allowed: {ex.method} {ex.path}")
                ex.respond(405, body, headers=[(b"Allow", ", ".join(allowed).encode())])
            else:
                ex.error(404, f"Not Found: {ex.path}")
            return None
        return found(ex)


def _norm(path: str) -> str:
    return path.rstrip("/") or "/"
