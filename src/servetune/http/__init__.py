"""servetune's one HTTP/1.1 layer, on llhttp (``httptools``, the parser behind uvicorn).

Everything in servetune that speaks HTTP uses it: the load generator's fast client
(:mod:`servetune.client.fasthttp`), the simulated engine's server (:mod:`servetune.sim`), the
scripted test server (:mod:`servetune.testserver`) and the gateway. Nothing here knows about
OpenAI, SSE or engines: it moves requests and response bodies.

Server side (:mod:`servetune.http.server` listens and shuts down,
:mod:`servetune.http.connection` parses and answers each connection's requests,
:mod:`servetune.http.exchange` is one request and its response,
:mod:`servetune.http.router` routes)::

    from servetune.http import Exchange, HTTPServer, Limits, Router

    async def completions(ex: Exchange) -> None:      # a coroutine: runs as a task
        req = orjson.loads(ex.body)
        ex.start(200)                                  # chunked, text/event-stream
        async for piece in generate(req):
            ex.send(b"data: " + piece + b"\\n\\n")     # one chunk; big ones are not copied
            await ex.drain()                           # back-pressure from a slow client
        ex.end(b"data: [DONE]\\n\\n")

    def health(ex: Exchange) -> None:                  # a plain function: answers at once
        ex.respond(200, b"", content_type=None)

    router = Router()
    router.get("/health", health)
    router.post("/v1/completions", completions)
    server = HTTPServer(router, limits=Limits(keepalive_timeout_s=75))
    port = await server.start("127.0.0.1", 0)         # or sock=..., ssl_context=...
    ...
    await server.drain(timeout_s=30)                   # stop accepting, finish in-flight work

- :class:`Exchange` is one request (``method``, ``path``, ``query``, ``headers`` as lower-case
  byte pairs, ``body``, ``arrival_ns`` — ``perf_counter_ns`` of its first byte) and its one
  response: :meth:`~Exchange.respond` / :meth:`~Exchange.respond_json` /
  :meth:`~Exchange.error` for a whole body, or :meth:`~Exchange.start`, :meth:`~Exchange.send`,
  :meth:`~Exchange.end` for a stream. Callers that assemble bytes ahead of time (the simulated
  engine builds a step's tokens while the step's time runs) frame them with
  :meth:`~Exchange.frame`, write them with :meth:`~Exchange.send_framed` (or straight to the
  socket) and close with :meth:`~Exchange.complete`. :attr:`~Exchange.on_close` is called if
  the client goes away first; :meth:`~Exchange.abort` cuts the connection.
- Connections keep alive; requests on one connection are answered in order, one at a time
  (later ones wait, reading pauses past ``Limits.max_pipelined``). ``Expect: 100-continue``
  is honoured; heads over ``max_head_bytes`` get 431, bodies over ``max_body_bytes`` 413,
  malformed requests 400, each followed by closing the connection. HTTP/1.0 peers get their
  stream framed by closing the connection.
- A plain-function handler may leave the response open and finish it later; a coroutine
  handler must have finished it when it returns (or the connection is cut: an unfinished
  stream never looks finished) and is cancelled when the client disconnects. An exception in
  a handler is a 500 when nothing was sent yet, else a cut connection.
- Error bodies are built by the server's ``error_body(status, message, type)``:
  :func:`~servetune.http.wire.openai_error` by default,
  :func:`~servetune.http.wire.vllm_error` for vLLM's older shape.
- ``on_connect`` / ``on_disconnect`` see each :class:`ServerConnection` (its ``sock``,
  ``transport``, and ``tag`` for the application's state).

Client side (:mod:`servetune.http.response`): :class:`ResponseReader`, the base of a client
connection, turns the bytes read into ``on_head(status, headers)``, ``on_body(piece)`` and
``on_end(keep_alive)``, and says at close whether the body was complete, cut mid-body or cut
before its head. The client's pool, sockets and kernel arrival stamps stay in
:mod:`servetune.client` (its transports are the interface; this is their parser).

Bytes (:mod:`servetune.http.wire`): response heads, chunk framing, error bodies.
"""

from servetune.http.connection import Limits, ServerConnection
from servetune.http.exchange import Exchange
from servetune.http.response import ProtocolError, ResponseReader
from servetune.http.router import Router
from servetune.http.server import HTTPServer

__all__ = [
    "Exchange",
    "HTTPServer",
    "Limits",
    "ProtocolError",
    "ResponseReader",
    "Router",
    "ServerConnection",
]
