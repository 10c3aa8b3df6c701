"""The gateway's configuration read in: ``gateway.yaml`` (:func:`load_config`), a mapping
(:func:`parse_config`) or the first-run flags (:func:`config_from_flags`), into the model of
:mod:`servetune.gateway.config`; a bad one is a :class:`~servetune.errors.ConfigError` that
names the file, line or field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servetune.errors import ConfigError
from servetune.gateway.config.model import GatewayConfig


def _yaml_error(path: Path, exc: Exception) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    return ConfigError(
        f"{where}: not valid YAML ({problem})",
        hint="fix the YAML at that line (a bracket or quote left open, a tab for indentation)",
    )


def _validation_error(source: str, exc: ValidationError) -> ConfigError:
    lines = []
    for err in exc.errors()[:8]:
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (a typo?)"
        lines.append(f"{loc}: {msg}")
    more = len(exc.errors()) - len(lines)
    if more > 0:
        lines.append(f"... and {more} more")
    return ConfigError(
        f"{source}: invalid gateway configuration: " + "; ".join(lines),
        hint="see docs/gateway.md for every field",
    )


def parse_config(data: Any, source: str = "configuration") -> GatewayConfig:
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of fields",
            hint="start with `groups:` (docs/gateway.md shows a whole gateway.yaml)",
        )
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(source, exc) from None


def load_config(path: str | Path) -> GatewayConfig:
    """Read ``gateway.yaml`` (YAML or JSON); relative paths in it are relative to its folder."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{p}: no such file", hint="give the path of a gateway.yaml (docs/gateway.md)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{p}: cannot be read ({exc})", hint="give a readable UTF-8 YAML file, not a folder"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(p, exc) from None
    if data is None:
        raise ConfigError(f"{p}: the file is empty", hint="at least `groups:` with one URL")
    cfg = parse_config(data, str(p))
    return _resolve_paths(cfg, p.parent)


def _resolve_paths(cfg: GatewayConfig, base: Path) -> GatewayConfig:
    def fix(v: str | None) -> str | None:
        if v is None or Path(v).is_absolute():
            return v
        return str(base / v)

    cfg.key_files = [f for f in (fix(k) for k in cfg.key_files) if f]
    audit = fix(cfg.audit_log)
    assert audit is not None
    cfg.audit_log = audit
    cfg.canary.quality_verdict_file = fix(cfg.canary.quality_verdict_file)
    for g in cfg.groups:
        g.from_sweep = fix(g.from_sweep)
        g.tokenizer = fix(g.tokenizer)
    return cfg


def config_from_flags(
    upstreams: list[str],
    listen: str = "127.0.0.1:8080",
    api_key_files: list[str] | None = None,
    max_concurrency: int | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    redis: str | None = None,
    upstream_concurrency: int | None = None,
    from_sweep: str | None = None,
    tokenizer: str | None = None,
    audit_log: str | None = None,
    priority_headroom: int | None = None,
) -> GatewayConfig:
    """The first-run configuration: one group of ``upstreams``; the limits apply per key (each
    key its own tenant) or, without keys, to everyone together."""
    limits: dict[str, Any] = {
        k: v
        for k, v in {
            "max_concurrency": max_concurrency,
            "rpm": rpm,
            "tpm": tpm,
            "max_tokens": max_tokens,
            "max_input_tokens": max_input_tokens,
        }.items()
        if v is not None
    }
    data: dict[str, Any] = {
        "listen": listen,
        "groups": [
            {
                "name": "default",
                "urls": upstreams,
                "max_concurrency": upstream_concurrency,
                "from_sweep": from_sweep,
                "tokenizer": tokenizer,
            }
        ],
        "defaults": limits,
        "key_files": list(api_key_files or []),
        "redis": redis,
    }
    if audit_log:
        data["audit_log"] = audit_log
    if priority_headroom is not None:
        data["queue"] = {"priority_headroom": priority_headroom}
    return parse_config(data, "command-line flags")
