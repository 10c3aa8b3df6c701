"""The gateway's configuration: the model (:mod:`.model`, every field and its range) and
reading it from YAML or command-line flags (:mod:`.load`, with actionable errors)."""

from servetune.gateway.config.load import config_from_flags, load_config, parse_config
from servetune.gateway.config.model import (
    AuthMode,
    CanaryPolicy,
    GatewayConfig,
    TenantLimits,
    host_port,
)

__all__ = [
    "AuthMode",
    "CanaryPolicy",
    "GatewayConfig",
    "TenantLimits",
    "config_from_flags",
    "host_port",
    "load_config",
    "parse_config",
]
