"""Gateway fixtures: a real Redis (Debian's redis-server) on a free loopback port in a temporary
directory, stopped afterwards. Missing redis-server skips (and fails under CI=true, where
scripts/ci-system-deps.sh must have installed it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer, start_redis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis(tmp_path)
    try:
        yield server
    finally:
        server.stop()
