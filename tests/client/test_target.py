"""The first thing a bench asks a --base-url (/v1/models): a URL that cannot be one, and a port
where something answers but not in HTTP, are said as such in one line."""

from __future__ import annotations

import asyncio
import re
import socket
import threading

import aiohttp
import pytest

from servetune.client.http import normalize_base_url
from servetune.client.target import probe_target
from servetune.errors import ConfigError, TargetError


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("https://h/v1/", "https://h/v1"),
    ],
)
def test_base_urls_normalize(given: str, url: str) -> None:
    assert normalize_base_url(given) == url


@pytest.mark.parametrize(
    ("given", "said"),
    [
        # was probed as http://ftp://127.0.0.1:1/v1/models ("Name or service not known")
        ("ftp://127.0.0.1:1/v1", "is not an http(s) URL"),
        # was aiohttp's "InvalidUrlClientError: http://127.0.0.1:99999/v1/models"
        ("http://127.0.0.1:99999/v1", "is not a valid URL"),
        ("http://127.0.0.1:port/v1", "is not a valid URL"),
    ],
)
def test_urls_that_cannot_be_a_server_are_config_errors(given: str, said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)) as err:
        normalize_base_url(given)
    assert err.value.hint is not None and "http://127.0.0.1:8000/v1" in err.value.hint


def test_a_port_that_answers_but_not_in_http_is_said_on_one_line() -> None:
    """An SSH banner gave aiohttp's five-line "Bad status line" dump and the hint "is the
    server running?" (it is; it is not an HTTP server)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nnot http\r\n")

    threading.Thread(target=answer, daemon=True).start()

    async def probe() -> None:
        async with aiohttp.ClientSession() as session:
            await probe_target(session, f"http://127.0.0.1:{port}/v1", None)

    try:
        with pytest.raises(TargetError) as err:
            asyncio.run(probe())
    finally:
        srv.close()
    assert "did not answer in HTTP" in err.value.message and "\n" not in err.value.message
    assert err.value.hint is not None and "HTTP server" in err.value.hint
