"""Admin-action notifications (nsqadmin/notify.go): POSTed as JSON to --notification-http-endpoint.

The answer to the operator never waits for the endpoint: each notification is sent by a
task of its own, through the same pooled client and deadlines as every upstream request,
and a failure is logged, not retried. Stopping nsqadmin waits for those still on the way.
"""

import asyncio
import base64
import binascii
import logging
import socket
import time

from starlette.requests import Request

from clusterinfo.upstream import Upstream, UpstreamError
from common import gojson
from serving.starlette_v1 import client_address


log = logging.getLogger("nsqadmin")


def basic_auth_user(request: Request) -> str:
    """The user name of an ``Authorization: Basic`` header, or ""."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme != "Basic":
        return ""
    try:
        user, colon, _ = base64.b64decode(encoded, validate=True).decode("utf-8", "replace").partition(":")
    except (binascii.Error, ValueError):
        return ""
    return user if colon else ""


def request_url(request: Request) -> str:
    scheme = "https" if request.url.scheme == "https" or request.headers.get("x-scheme") == "https" else "http"
    url = f"{scheme}://{request.headers.get('host', '')}{request.url.path}"
    return f"{url}?{request.url.query}" if request.url.query else url


def admin_action(action: str, topic: str, channel: str, node: str, request: Request, now: float) -> dict:
    """NSQ's AdminAction, with its omitempty fields (channel, node, user) left out when empty."""
    event = {"action": action, "topic": topic}
    if channel:
        event["channel"] = channel
    if node:
        event["node"] = node
    event["timestamp"] = int(now)
    user = basic_auth_user(request)
    if user:
        event["user"] = user
    event.update({"remote_ip": client_address(request.scope), "user_agent": request.headers.get("user-agent", ""),
                  "url": request_url(request), "via": socket.gethostname()})
    return event


class Notifier:
    def __init__(self, endpoint: str, upstream: Upstream):
        self.endpoint = endpoint
        self.upstream = upstream
        self._sending: set[asyncio.Task] = set()

    def notify(self, action: str, request: Request, topic: str, channel: str = "", node: str = "") -> None:
        if not self.endpoint:
            return
        body = gojson.dumps(admin_action(action, topic, channel, node, request, time.time()))
        task = asyncio.create_task(self._send(body))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, body: bytes) -> None:
        log.info("POSTing notification to %s", self.endpoint)
        try:
            status = await self.upstream.post_json(self.endpoint, body)
        except UpstreamError as exc:
            log.error("failed to POST notification - %s", exc)
            return
        if status >= 400:
            log.warning("notification endpoint %s answered %d", self.endpoint, status)

    async def drain(self) -> None:
        """Wait for the notifications still being sent."""
        if self._sending:
            await asyncio.wait(set(self._sending))
