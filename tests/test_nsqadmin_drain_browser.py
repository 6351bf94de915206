"""nsqadmin's Drain action (beyond NSQ: nsqd/drain.py) in a real browser: an operator drains an
nsqd from its node page after confirming, the page shows the drain and the messages left, the
action is announced to the notification endpoint, and the nsqd exits 0 once its consumer took
everything. A form from elsewhere (no CSRF token, or a request the browser marks cross-site) and a user
who is not an admin change nothing.
Screenshots go under artifacts/screenshots/ (nsqadmin-drain*.png)."""

import re

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import AdminProcess, Consumer, RecordingEndpoint, wait_for
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess

pytestmark = pytest.mark.browser


@pytest.fixture
def drained(tmp_path):
    """nsqlookupd, an nsqd holding 40 messages on a paused channel, nsqadmin (admin: boss) notifying an endpoint."""
    lookupd = LookupdProcess("--broadcast-address=127.0.0.1")
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--broadcast-address=127.0.0.1", "--mem-queue-size=10",
                       f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
    endpoint = RecordingEndpoint()
    admin = AdminProcess(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", "--admin-user=boss",
                         f"--notification-http-endpoint={endpoint.url}")
    node = f"127.0.0.1:{nsqd.http_port}"
    for path in ("/topic/create?topic=jobs", "/channel/create?topic=jobs&channel=work",
                 "/channel/pause?topic=jobs&channel=work"):
        assert httpx.post(f"http://{node}{path}").status_code == 200
    assert httpx.post(f"http://{node}/mpub?topic=jobs", content=b"\n".join(b"job %d" % n for n in range(40))).is_success
    wait_for(lambda: httpx.get(f"http://127.0.0.1:{lookupd.http_port}/nodes").json()["producers"], what="node listed")
    yield nsqd, node, admin, endpoint
    admin.stop()
    nsqd.stop()
    lookupd.stop()
    endpoint.close()


def test_drain_a_node_from_its_page_and_watch_it_empty(drained, chromium, screenshot):
    nsqd, node, admin, endpoint = drained
    context = chromium.new_context(base_url=admin.url, viewport={"width": 1360, "height": 860},
                                   extra_http_headers={"X-Forwarded-User": "boss"})
    page = context.new_page()
    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    try:
        page.goto(f"/nodes/{node}")
        expect(page.locator("#drain-progress")).to_have_count(0)
        screenshot(page, "nsqadmin-drain-before")
        page.get_by_role("button", name="Drain").click()
        expect(page.locator(".banner-ok")).to_have_text(f"Draining {node}.")
        assert questions and questions[0].startswith(f"Drain {node}?") and "cannot be cancelled" in questions[0]
        expect(page.locator("#draining")).to_have_text("draining")
        expect(page.locator("#drain-progress .value")).to_have_text("40")
        expect(page.get_by_role("button", name="Drain")).to_have_count(0)
        screenshot(page, "nsqadmin-drain-started")
        assert httpx.get(f"http://{node}/info").json()["draining"] is True
        [event] = endpoint.wait_for(1)
        assert (event["action"], event["topic"], event["node"]) == ("drain_node", "", node)
        api = httpx.get(f"{admin.url}/api/nodes/{node}").json()
        assert api["draining"] is True and api["drain_messages_left"] == 40

        consumer = Consumer(nsqd.tcp_port, "jobs", "work", rdy=10)
        try:
            httpx.post(f"http://{node}/channel/unpause?topic=jobs&channel=work")
            assert nsqd.proc.wait(timeout=60) == 0
            assert consumer.delivered == 40
        finally:
            consumer.close()
    finally:
        context.close()


def test_a_form_without_its_token_or_from_a_non_admin_starts_no_drain(drained):
    nsqd, node, admin, endpoint = drained
    forged = httpx.post(f"{admin.url}/nodes/{node}", data={"action": "drain", "confirm": "yes"},
                        headers={"X-Forwarded-User": "boss"})
    assert forged.status_code == 403
    refused = httpx.post(f"{admin.url}/api/nodes/{node}", json={"action": "drain"},
                         headers={"X-Forwarded-User": "mallory"})
    assert refused.status_code == 403
    cross_site = httpx.post(f"{admin.url}/api/nodes/{node}", json={"action": "drain"},
                            headers={"X-Forwarded-User": "boss", "Sec-Fetch-Site": "cross-site"})
    assert cross_site.status_code == 403
    bad = httpx.post(f"{admin.url}/api/nodes/{node}", json={"action": "explode"}, headers={"X-Forwarded-User": "boss"})
    assert (bad.status_code, bad.json()) == (400, {"message": "INVALID_ACTION"})
    unknown = httpx.post(f"{admin.url}/api/nodes/127.0.0.1:1", json={"action": "drain"},
                         headers={"X-Forwarded-User": "boss"})
    assert (unknown.status_code, unknown.json()) == (404, {"message": "NODE_NOT_FOUND"})
    assert endpoint.received == []
    assert "draining" not in httpx.get(f"http://{node}/info").json()
    assert re.search(r"<h1>", httpx.get(f"{admin.url}/nodes/{node}").text)
