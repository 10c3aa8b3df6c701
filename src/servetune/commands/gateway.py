"""``servetune gateway``: keys, caps, token quotas, fair queueing and canaries in front of
OpenAI-compatible engines (see docs/gateway.md).

``servetune gateway --config gateway.yaml``            the full configuration
``servetune gateway --upstream URL [--upstream URL]``  a first run: one group, limits per key
``servetune gateway keygen [--tenant NAME | --admin]`` a new API key and its stored (hashed) form
``servetune gateway hash-key``                         the stored form of a key read from stdin
``servetune gateway check --config gateway.yaml``      validate a configuration and summarise it
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="gateway.yaml (YAML or JSON); reloaded on SIGHUP")
    p.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL",
        help="an engine's base URL (http://host:port/v1); repeat for replicas (without --config)",
    )
    p.add_argument("--listen", default=None, help="host:port to serve on (default 127.0.0.1:8080)")
    p.add_argument(
        "--api-key-file",
        action="append",
        default=[],
        metavar="FILE",
        help="'KEY [TENANT]' lines; each key is a tenant with the limits below",
    )
    lim = p.add_argument_group("limits per key (or for everyone without keys)")
    lim.add_argument("--max-concurrency", type=int, help="requests at once")
    lim.add_argument("--rpm", type=int, help="requests per minute")
    lim.add_argument("--tpm", type=int, help="tokens per minute (prompt + max_tokens reserved)")
    lim.add_argument("--max-tokens", type=int, help="cap on max_tokens (clamped)")
    lim.add_argument("--max-input-tokens", type=int, help="prompts over this are refused")
    up = p.add_argument_group("admission at the upstreams")
    up.add_argument(
        "--upstream-concurrency", type=int, help="admission limit per upstream (requests wait)"
    )
    up.add_argument(
        "--from-sweep", metavar="DIR", help="take the limit from a sweep's comfortable concurrency"
    )
    up.add_argument("--tokenizer", help="the served model's tokenizer (exact input counts)")
    up.add_argument(
        "--priority-headroom",
        type=int,
        metavar="N",
        help="free slots of each upstream kept for a higher priority class while one of its "
        "requests runs or waits (default 1; with --config it overrides queue.priority_headroom)",
    )
    p.add_argument("--redis", help="redis://host:port/db: replicas share counters exactly")
    p.add_argument("--audit-log", help="decisions log (default gateway-audit.jsonl)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    sub = p.add_subparsers(dest="gateway_command", metavar="SUBCOMMAND")
    kg = sub.add_parser("keygen", help="make an API key and print its stored (hashed) form")
    kg.add_argument("--tenant", default=None, help="tenant the key belongs to")
    kg.add_argument("--admin", action="store_true", help="an admin key (for the admin API)")
    sub.add_parser("hash-key", help="print the stored form of a key read from standard input")
    ck = sub.add_parser("check", help="validate a configuration and print what it sets")
    ck.add_argument("--config", dest="check_config", required=True)


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "gateway_command", None)
    if cmd == "keygen":
        return _keygen(args)
    if cmd == "hash-key":
        return _hash_key()
    if cmd == "check":
        return _check(args.check_config)
    return _serve(args)


def _keygen(args: argparse.Namespace) -> int:
    from servetune.gateway.keys import hash_key, new_key

    key = new_key()
    stored = hash_key(key)
    print(f"key:    {key}")
    print(f"stored: {stored}")
    if args.admin:
        print(f"config: admin_keys: [{stored}]")
    elif args.tenant:
        print(f"config: tenants: - name: {args.tenant}\n          keys: [{stored}]")
        print(f"key file line: {stored} {args.tenant}")
    print("The key is shown once; only the stored form belongs in files.", file=sys.stderr)
    return 0


def _hash_key() -> int:
    from servetune.gateway.keys import hash_key

    lines = [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]
    if not lines:
        from servetune.errors import ConfigError

        raise ConfigError("no key on standard input", hint="echo KEY | servetune gateway hash-key")
    for line in lines:
        print(hash_key(line))
    return 0


def _check(path: str) -> int:
    from servetune.gateway.app import Gateway
    from servetune.gateway.config import load_config

    cfg = load_config(path)
    gw = Gateway(cfg, path)  # builds keys, tenants and limits: every error surfaces here
    print(f"{path}: valid ({gw.config_id})")
    for name, pool in gw.pools.items():
        limits = ", ".join(str(u.limit) if u.limit else "unlimited" for u in pool.upstreams)
        weight = gw.router.weights.get(name, 0.0)
        print(
            f"  group {name}: weight {weight:g}, {len(pool.upstreams)} upstream(s), limits {limits}"
        )
    for t in gw.tenants.values():
        lim = t.limits
        parts = [
            f"{k} {v}"
            for k, v in (
                ("concurrency", lim.max_concurrency),
                ("rpm", lim.rpm),
                ("tpm", lim.tpm),
                ("max_tokens", lim.max_tokens),
                ("max_input_tokens", lim.max_input_tokens),
            )
            if v is not None
        ]
        print(
            f"  tenant {t.name}: {cfg.queue.priorities[t.priority]}, weight {t.weight:g}, "
            f"{', '.join(parts) or 'unlimited'}"
        )
    print(
        f"  queue: priorities {', '.join(cfg.queue.priorities)} (highest first); "
        f"{cfg.queue.priority_headroom} slot(s) per upstream kept for a higher class while "
        "one is active"
    )
    print(f"  auth: {'API keys' if gw.auth else 'none (everyone is tenant default)'}")
    print(f"  state: {'redis ' + cfg.redis if cfg.redis else 'in memory (one replica)'}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    from servetune import aio
    from servetune.errors import ConfigError
    from servetune.gateway.config import config_from_flags, load_config

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.config:
        if args.upstream:
            raise ConfigError("give either --config or --upstream, not both")
        cfg = load_config(args.config)
        if args.listen:
            cfg.listen = args.listen
        if args.redis:
            cfg.redis = args.redis
        if args.audit_log:
            cfg.audit_log = args.audit_log
        if args.priority_headroom is not None:
            cfg.queue.priority_headroom = _headroom(args.priority_headroom)
    else:
        if not args.upstream:
            raise ConfigError(
                "no upstream: give --upstream URL (an engine's base URL) or --config FILE",
                hint="servetune gateway --upstream http://127.0.0.1:8000/v1 --max-concurrency 8",
            )
        cfg = config_from_flags(
            args.upstream,
            listen=args.listen or "127.0.0.1:8080",
            api_key_files=args.api_key_file,
            max_concurrency=args.max_concurrency,
            rpm=args.rpm,
            tpm=args.tpm,
            max_tokens=args.max_tokens,
            max_input_tokens=args.max_input_tokens,
            redis=args.redis,
            upstream_concurrency=args.upstream_concurrency,
            from_sweep=args.from_sweep,
            tokenizer=args.tokenizer,
            audit_log=args.audit_log,
            priority_headroom=args.priority_headroom,
        )
    return aio.run(_main(cfg, args.config))


def _headroom(n: int) -> int:
    if n < 0:
        from servetune.errors import ConfigError

        raise ConfigError(f"--priority-headroom {n}: give 0 or more slots")
    return n


async def _main(cfg: object, path: str | None) -> int:
    import asyncio
    import signal

    from servetune.gateway.app import Gateway
    from servetune.gateway.config import GatewayConfig, host_port

    assert isinstance(cfg, GatewayConfig)
    gw = Gateway(cfg, path)
    import gc

    # The heap built at start-up (config, tokenizer, imports) is never garbage: keep the
    # collector off it, and let young collections run less often (each request makes a few
    # dozen short-lived objects; a full scan mid-stream would stall every stream).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    try:
        port = await gw.start()
    except OSError as exc:
        from servetune.errors import ConfigError

        raise ConfigError(f"cannot listen on {cfg.listen}: {exc.strerror}") from None
    host, _ = host_port(cfg.listen)
    upstreams = sum(len(g.urls) for g in cfg.groups)
    print(
        f"servetune gateway listening on http://{host}:{port} — {len(cfg.groups)} group(s), "
        f"{upstreams} upstream(s), {'keys' if gw.auth else 'no auth'}, state {gw.store.name}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("servetune gateway: stopping (finishing open streams, up to 30 s)", flush=True)
    await gw.stop(drain_s=30.0)
    return 0
