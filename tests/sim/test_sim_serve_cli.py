"""`servetune sim serve` where it cannot listen: one error line and exit 2."""

from __future__ import annotations

import socket

import pytest

from servetune.cli import main


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_that_is_no_port(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    """99999 silently wrapped round to 34463 (and was announced as that); -1 was a
    socket.gaierror traceback."""
    assert main(["sim", "serve", "--port", port]) == 2
    assert f"--port {port} is not a port" in capsys.readouterr().err


def test_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    """Was an OSError traceback from uvloop's create_server."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        assert main(["sim", "serve", "--port", str(port)]) == 2
    finally:
        held.close()
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "address already in use" in err
    assert "Traceback" not in err and "hint:" in err
