"""Who may change the cluster through nsqadmin: admin users, same-site requests, /config's network.

* ``--admin-user`` with ``--acl-http-header``: when admin users are listed, only a request
  whose header names one of them may act (NSQ's isAuthorizedAdminRequest); the pages hide
  the actions from everyone else.
* Cross-site requests: a state-changing request (anything but GET, HEAD, OPTIONS) that a
  browser marks as coming from another site (``Sec-Fetch-Site``, else ``Origin``, else
  ``Referer``) is refused, so a page elsewhere cannot act through an operator's browser.
  Scripts (curl, NSQ's tooling) send none of these headers and are not affected. The
  forms of nsqadmin's own pages also carry a token that must match a SameSite=Strict
  cookie (double submit), for browsers too old to send those headers.
* ``/config/:opt`` answers only clients inside ``--allow-config-from-cidr``.
"""

import ipaddress
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CSRF_COOKIE = "nsqadmin_csrf"
CSRF_FIELD = "csrf"


def is_admin(request: Request, opts) -> bool:
    if not opts.admin_user:
        return True
    return request.headers.get(opts.acl_http_header, "") in opts.admin_user


def _own_hosts(request: Request) -> set[str]:
    hosts = {request.headers.get("host", "").lower()}
    forwarded = request.headers.get("x-forwarded-host")
    if forwarded:
        hosts.add(forwarded.split(",")[0].strip().lower())
    return hosts


def is_cross_site(request: Request) -> bool:
    """Whether a browser says this request comes from a page of another origin."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    for header in ("origin", "referer"):
        value = request.headers.get(header)
        if value is not None:
            return urlsplit(value).netloc.lower() not in _own_hosts(request)
    return False


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_token_matches(request: Request, submitted: str) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    return bool(cookie) and secrets.compare_digest(cookie.encode(), submitted.encode())


def config_allowed(request: Request, network) -> bool | None:
    """True/False for a client inside/outside ``network``; None if its address cannot be read."""
    if network is None:
        return True
    client = request.scope.get("client")
    if not client:
        return None
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.version == network.version and address in network
