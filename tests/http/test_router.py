"""The router: exact routes, prefixes, 404 and 405."""

from __future__ import annotations

from servetune.http import Exchange, Router


def h1(ex: Exchange) -> None: ...


def h2(ex: Exchange) -> None: ...


def h3(ex: Exchange) -> None: ...


def test_exact_then_longest_prefix_then_404_405() -> None:
    r = Router()
    r.get("/v1/models", h1)
    r.add(["POST"], "/v1/completions/", h2)
    r.prefix("/v1/", h3)
    r.prefix("/admin/", h1, methods=["POST"])
    assert r.resolve("GET", "/v1/models/") is h1
    assert r.resolve("POST", "/v1/completions") is h2
    assert r.resolve("GET", "/v1/completions") == (405, ["POST"])
    assert r.resolve("DELETE", "/v1/files/x") is h3
    assert r.resolve("GET", "/v1") is h3  # the prefix's own root
    assert r.resolve("GET", "/admin/reload") == (405, ["POST"])
    assert r.resolve("POST", "/admin/reload") is h1
    assert r.resolve("GET", "/metrics") == (404, [])
