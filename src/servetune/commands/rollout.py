"""``servetune rollout``: move traffic to a candidate group in steps; the gateway judges each
step on what it measures and promotes or rolls back by itself.

    servetune rollout --gateway http://127.0.0.1:8080 --candidate candidate --steps 5,25,50,100

The admin key comes from ``--admin-key-file`` or ``$SERVETUNE_ADMIN_KEY``. The command follows
the rollout and prints each decision; its exit status says how it ended: 0 promoted,
1 rolled back or aborted (or ended unseen: another rollout replaced it between two looks).
``--status`` prints the current state, ``--abort`` stops a running rollout (the candidate's
weight goes back to 0), ``--no-follow`` returns once it started.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway", required=True, help="the gateway's URL (http://host:port)")
    p.add_argument("--candidate", help="the upstream group to roll out")
    p.add_argument("--steps", default="5,25,50,100", help="traffic percentages, rising to 100")
    p.add_argument(
        "--admin-key-file", help="file holding the admin key (else $SERVETUNE_ADMIN_KEY)"
    )
    p.add_argument("--status", action="store_true", help="print the current rollout and exit")
    p.add_argument("--abort", action="store_true", help="abort the running rollout")
    p.add_argument("--no-follow", action="store_true", help="return once the rollout started")
    p.add_argument("--timeout", type=float, default=None, help="stop following after this long (s)")


def _key(args: argparse.Namespace) -> str:
    from servetune.errors import ConfigError

    if args.admin_key_file:
        try:
            key = Path(args.admin_key_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"--admin-key-file {args.admin_key_file}: {exc.strerror}",
                hint="give the file holding the admin key, or set SERVETUNE_ADMIN_KEY",
            ) from None
    else:
        key = os.environ.get("SERVETUNE_ADMIN_KEY", "").strip()
    if not key:
        raise ConfigError(
            "no admin key: give --admin-key-file or set SERVETUNE_ADMIN_KEY",
            hint="make one with `servetune gateway keygen --admin` and add it to admin_keys",
        )
    return key


def run(args: argparse.Namespace) -> int:
    from servetune import aio
    from servetune.errors import ConfigError
    from servetune.gateway.rollout import parse_steps

    if args.status and args.abort:
        raise ConfigError(
            "--status and --abort contradict each other: give one",
            hint="--status to look at the rollout, --abort to stop it",
        )
    if args.timeout is not None and not 0 < args.timeout < math.inf:
        # NaN followed forever, a negative one gave up at once (exit 1)
        raise ConfigError(
            f"--timeout must be a positive number of seconds (got {args.timeout:g})",
            hint="e.g. --timeout 3600, or leave it out to follow until the rollout ends",
        )
    if not (args.status or args.abort) and not args.candidate:
        raise ConfigError("--candidate is required to start a rollout (or use --status, --abort)")
    steps = parse_steps(args.steps) if not (args.status or args.abort) else []
    return aio.run(_main(args, _key(args), steps))


class _Admin:
    def __init__(self, url: str, key: str) -> None:
        from urllib.parse import urlsplit

        from servetune.errors import ConfigError
        from servetune.gateway.upstream import ConnectionPool

        parts = urlsplit(url.rstrip("/"))
        try:
            port = parts.port  # a port out of range or not a number: a ValueError
        except ValueError:
            port = -1
        if parts.scheme != "http" or not parts.hostname or port == -1:
            raise ConfigError(
                f"--gateway {url!r}: expected http://host:port",
                hint="the URL the gateway listens on, e.g. --gateway http://127.0.0.1:8080",
            )
        self.url = url
        self.pool = ConnectionPool(parts.hostname, port or 80)
        self.auth = b"Authorization: Bearer %s\r\n" % key.encode()

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        import orjson

        from servetune.errors import TargetError
        from servetune.gateway.upstream import fetch

        data = None if body is None else orjson.dumps(body)
        try:
            status, _h, raw = await fetch(self.pool, method, path, self.auth, 30.0, body=data)
        except (OSError, ConnectionError, TimeoutError) as exc:
            raise TargetError(
                f"cannot reach the gateway at {self.url}: {exc}",
                hint="is `servetune gateway` running there? check --gateway",
            ) from None
        try:
            return status, orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return status, raw.decode("utf-8", "replace")


def _error_of(obj: Any) -> str:
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        return str(obj["error"].get("message"))
    return str(obj)[:300]


def _is_rollout(obj: Any) -> bool:
    """A rollout's state as the gateway sends it (another server's 200 is not one: printed,
    it read "[None] step 0/0 (-):" with exit 0)."""
    return isinstance(obj, dict) and "status" in obj and "step_index" in obj


def _line(st: dict[str, Any]) -> str:
    step = st.get("step_index", -1)
    steps = st.get("steps") or []
    pct = f"{steps[step]:g} %" if 0 <= step < len(steps) else "-"
    return f"[{st.get('status')}] step {step + 1}/{len(steps)} ({pct}): {st.get('reason', '')}"


async def _main(args: argparse.Namespace, key: str, steps: list[float]) -> int:
    import asyncio
    import time

    from servetune.errors import TargetError

    admin = _Admin(args.gateway, key)
    try:
        if args.status:
            status, obj = await admin.call("GET", "/admin/rollout")
            if status == 404:
                print("no rollout has run on this gateway")
                return 0
            if status != 200 or not _is_rollout(obj):
                raise TargetError(f"GET /admin/rollout: HTTP {status}: {_error_of(obj)}")
            print(_line(obj))
            return 0
        if args.abort:
            status, obj = await admin.call("DELETE", "/admin/rollout")
            if status != 200 or not _is_rollout(obj):
                raise TargetError(f"abort refused: HTTP {status}: {_error_of(obj)}")
            print(_line(obj))
            return 0
        status, obj = await admin.call(
            "POST", "/admin/rollout", {"candidate": args.candidate, "steps": steps}
        )
        if status != 202 or not isinstance(obj, dict) or "id" not in obj:
            refused = isinstance(obj, dict) and isinstance(obj.get("error"), dict)
            raise TargetError(
                (
                    "the gateway refused the rollout"
                    if refused
                    else f"{args.gateway} did not answer as a servetune gateway"
                )
                + f": POST /admin/rollout answered HTTP {status}: {_error_of(obj)}",
                hint=None if refused else "is --gateway the URL of `servetune gateway`?",
            )
        rid = obj["id"]
        print(f"rollout {rid} of {args.candidate!r} started: steps {steps}", flush=True)
        if args.no_follow:
            return 0
        seen = 0
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            status, obj = await admin.call("GET", "/admin/rollout")
            if status != 200 or not isinstance(obj, dict):
                raise TargetError(f"GET /admin/rollout: HTTP {status}: {_error_of(obj)}")
            if obj.get("id") != rid:
                # ours ended between two looks and another started: its outcome is not ours
                print(
                    f"rollout {rid} ended unseen: the gateway runs rollout {obj.get('id')} "
                    f"now ({_line(obj)}); see the gateway's audit log for {rid}",
                    file=sys.stderr,
                )
                return 1
            history = obj.get("history") or []
            for h in history[seen:]:
                weights = h.get("new_weights")
                w = f" weights {weights}" if weights else ""
                print(f"{h.get('time')} {h.get('action')}: {h.get('reason')}{w}", flush=True)
            seen = len(history)
            if obj.get("status") in ("promoted", "rolled_back", "aborted"):
                print(_line(obj))
                return 0 if obj["status"] == "promoted" else 1
            if args.timeout is not None and time.monotonic() - t0 > args.timeout:
                print(f"still running after {args.timeout:g} s: {_line(obj)}", file=sys.stderr)
                return 1
    finally:
        admin.pool.close()
