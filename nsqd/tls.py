"""nsqd's TLS setup (nsqd/nsqd.go buildTLSConfig) and what /stats reports of a TLS connection.

Client certificates: ``require`` and ``require-verify`` both ask for one and refuse a
client without it. Go's ``require`` takes any certificate unverified; Python's ssl
module cannot skip the verification of a certificate it asked for, so here both
policies verify it against --tls-root-ca-file (or the system's CAs).
"""

import ssl
import warnings
from typing import NamedTuple

from .options import TLS_VERSIONS

_GO_VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}
# OpenSSL's names of the TLS 1.2 suites OpenSSL offers by default -> Go's (IANA) names;
# TLS 1.3 suites have the same name in both.
_IANA_CIPHER_NAMES = {
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "AES128-GCM-SHA256": "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "AES256-GCM-SHA384": "TLS_RSA_WITH_AES_256_GCM_SHA384",
}
_MIN_VERSIONS = {number: ssl.TLSVersion(number) for number in TLS_VERSIONS.values()}


def server_context(opts) -> ssl.SSLContext | None:
    """The context for TLS on TCP and HTTPS; None unless --tls-cert or --tls-key is set.
    A missing or bad file raises OSError (ssl.SSLError is one): nsqd does not start."""
    if not opts.tls_cert and not opts.tls_key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(opts.tls_cert, opts.tls_key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # tls1.0 is NSQ's default; OpenSSL may still refuse it
        context.minimum_version = _MIN_VERSIONS[opts.tls_min_version]
    if opts.tls_client_auth_policy in ("require", "require-verify"):
        context.verify_mode = ssl.CERT_REQUIRED
        if opts.tls_root_ca_file:
            context.load_verify_locations(opts.tls_root_ca_file)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(opts) -> ssl.SSLContext:
    """For nsqd's own HTTPS requests (the auth server): --tls-root-ca-file, else the system's CAs."""
    return ssl.create_default_context(cafile=opts.tls_root_ca_file or None)


class TLSState(NamedTuple):
    """A TLS connection as /stats and the auth server see it."""

    version: str
    cipher_suite: str
    negotiated_protocol: str
    common_name: str


def tls_state(ssl_object: ssl.SSLObject) -> TLSState:
    cipher = ssl_object.cipher()[0]
    peer = ssl_object.getpeercert() or {}
    common_name = next((value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"), "")
    return TLSState(_GO_VERSION_NAMES.get(ssl_object.version(), ssl_object.version()),
                    _IANA_CIPHER_NAMES.get(cipher, cipher),
                    ssl_object.selected_alpn_protocol() or "",
                    common_name)
