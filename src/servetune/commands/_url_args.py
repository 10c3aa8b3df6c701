"""An argparse type for the URLs a command reads over HTTP, checked where the value enters."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit


def http_url(text: str) -> str:
    """An argparse type for a URL servetune reads over HTTP (``--dcgm-url``): another scheme
    was taken, failed at every scrape and the run went on without the figures it was for."""
    try:
        parts = urlsplit(text.strip())
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
        parts = urlsplit("")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL (e.g. http://127.0.0.1:9400/metrics)"
        )
    return text.strip()
