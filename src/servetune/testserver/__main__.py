"""``python -m servetune.testserver``: run the scripted OpenAI-compatible server."""

from __future__ import annotations

import argparse
import contextlib

from servetune.aio import run
from servetune.testserver.script import Script
from servetune.testserver.server import serve_forever


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m servetune.testserver")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--script", default="{}", help="the Script as JSON")
    args = p.parse_args()
    script = Script.model_validate_json(args.script)
    with contextlib.suppress(KeyboardInterrupt):
        run(serve_forever(script, args.port))


if __name__ == "__main__":
    main()
