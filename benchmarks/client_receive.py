"""CPU per streamed response on the fast client's receive path, for judging a change to it.

The client's capacity (``client_capacity.py``) is bounded by the CPU it spends per request;
its sustained-rate figure needs a quiet machine. This benchmark isolates the part a change to
the HTTP parser touches and measures it in CPU time (``time.process_time``), which other work
on a shared box disturbs far less than wall-clock latencies: the fast client's own connection
(``servetune.client.fasthttp``) reading from a kernel-stamped socket (``client.stamped``, a
``recvmsg`` with ``SO_TIMESTAMPNS`` per read), parsing HTTP and handing every body piece to
the SSE stream state (``client.stream``), which parses the events — exactly as in a run. The
server end of a loopback TCP connection writes the responses from the same process:

  burst   a 128-token response written at once (one read)
  spaced  the same response one token per write, each read before the next is written

With ``--against OTHER/src`` the same measurement runs in a subprocess on another checkout's
code (say, main before a change), alternating rounds, and the ratio is printed::

    .venv/bin/python benchmarks/client_receive.py [--against OTHER/src] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

TOKENS = 128


def _event(i: int, last: bool) -> bytes:
    fin = '"length"' if last else "null"
    return (
        'data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,'
        f'"text":" t{i % 10}","finish_reason":{fin}}}]}}\n\n'
    ).encode()


def _chunk(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
USAGE = (
    b'data: {"id":"c","object":"text_completion","model":"m","choices":[],'
    b'"usage":{"prompt_tokens":16,"completion_tokens":128,"total_tokens":144}}\n\n'
    b"data: [DONE]\n\n"
)
EVENTS = [_event(i, i == TOKENS - 1) for i in range(TOKENS)]
WHOLE = HEAD + _chunk(b"".join(EVENTS) + USAGE) + b"0\r\n\r\n"
SPACED = [HEAD + _chunk(EVENTS[0])] + [_chunk(e) for e in EVENTS[1:-1]]
SPACED.append(_chunk(EVENTS[-1]) + _chunk(USAGE) + b"0\r\n\r\n")


async def measure(shape: str, n: int) -> dict[str, Any]:
    """CPU seconds per response over ``n`` responses on one kept-alive connection."""
    from servetune.client.fasthttp import Pool, Response, _Conn
    from servetune.client.stamped import StampedSocket, StampReads
    from servetune.client.stream import StreamState

    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    for s in (client, server):
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
    pool = Pool("http://127.0.0.1:1/v1")
    reads = StampReads()
    conn = _Conn(pool)
    StampedSocket(reads, client, conn)
    tokens = 0
    pieces = SPACED if shape == "spaced" else [WHOLE]
    got = asyncio.Event()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        state = StreamState(chat=False)
        fut: asyncio.Future[Response] = loop.create_future()

        def sink(data: bytes, t: int, feed: Any = state.feed) -> None:
            feed(data, t)
            got.set()

        conn.waiter, conn.sink = fut, sink
        for p in pieces:
            got.clear()
            server.send(p)
            if p is not pieces[-1]:
                await got.wait()  # the client read this piece before the next is written
        resp = await fut
        state.close(time.perf_counter_ns())
        assert resp.status == 200 and state.done, "response not parsed whole"
        tokens += len(state.chunk_ns)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    assert tokens == n * TOKENS, tokens
    pool.close()
    reads.close()
    client.close()
    server.close()
    return {"cpu_us": cpu / n * 1e6, "wall_us": wall / n * 1e6, "kernel_reads": reads.kernel}


def child(shape: str, n: int) -> None:
    import uvloop

    print(json.dumps(uvloop.run(measure(shape, n))))


def run(shape: str, n: int, src: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--child", shape, str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="SRC", help="another checkout's src/ to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--burst-n", type=int, default=3000)
    ap.add_argument("--spaced-n", type=int, default=300)
    args = ap.parse_args()
    print(f"client receive path, {TOKENS}-token responses; load {os.getloadavg()[0]:.2f}")
    for shape, n in (("burst", args.burst_n), ("spaced", args.spaced_n)):
        this: list[float] = []
        other: list[float] = []
        for k in range(args.rounds):
            pair = [("this", None)] + ([("against", args.against)] if args.against else [])
            if k % 2:
                pair.reverse()  # alternate who goes first
            for who, src in pair:
                r = run(shape, n, src)
                (this if who == "this" else other).append(r["cpu_us"])
                print(
                    f"  {shape:6s} round {k + 1} {who:8s}: {r['cpu_us']:8.1f} us CPU per response"
                    f" ({r['wall_us']:.1f} us wall, {r['kernel_reads']} kernel-stamped reads;"
                    f" load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
        line = f"{shape:6s} median CPU per response: this {statistics.median(this):.1f} us"
        if other:
            m_this, m_other = statistics.median(this), statistics.median(other)
            line += f", against {m_other:.1f} us: ratio against/this {m_other / m_this:.2f}x"
        print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
