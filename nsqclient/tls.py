"""The TLS context a connection upgrades with after IDENTIFY (go-nsq config.go tlsConfig, conn.go upgradeTLS)."""

import ssl

from .config import TLS_VERSIONS, Config
from .errors import ConfigError


def client_context(config: Config) -> ssl.SSLContext:
    """``tls_config`` as given, else one built from the tls_* options."""
    if config.tls_config is not None:
        return config.tls_config
    try:
        context = ssl.create_default_context(cafile=config.tls_root_ca_file or None)
    except OSError as exc:
        raise ConfigError(f"ERROR: failed to read custom Certificate Authority file {exc}") from None
    if config.tls_insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.tls_cert and config.tls_key:
        try:
            context.load_cert_chain(config.tls_cert, config.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"failed to load the client certificate {config.tls_cert}: {exc}") from None
    if config.tls_min_version:
        context.minimum_version = TLS_VERSIONS[config.tls_min_version]
    return context
