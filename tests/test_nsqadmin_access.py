"""Who may do what through nsqadmin: --admin-user with --acl-http-header, notifications of every action
to --notification-http-endpoint (a real HTTP endpoint here), /config only from --allow-config-from-cidr,
and everything served under --base-path."""

import base64
import re
import socket
import time

import httpx
import pytest

from .admin_helpers import RecordingEndpoint, cluster, nsqd_stats, topic_on, wait_for  # noqa: F401

NOTIFICATION_KEYS = {"action", "topic", "timestamp", "remote_ip", "user_agent", "url", "via"}


@pytest.fixture
def start_admin(cluster):
    started = []

    def start(*args: str):
        started.append(cluster.start_admin(*args))
        return started[-1]

    yield start
    for admin in started:
        assert admin.stop() == 0


# -- --admin-user ---------------------------------------------------------------------------


def test_only_listed_admins_may_act(cluster, start_admin):
    topic_on(cluster, "acl", "c")
    admin = start_admin("--admin-user=alice", "--admin-user=carol", "--acl-http-header=X-Auth-User")
    action = {"action": "pause"}
    for headers in ({}, {"X-Auth-User": "bob"}, {"X-Forwarded-User": "alice"}):
        for method, path, body in (("POST", "/api/topics/acl/c", action), ("POST", "/api/topics", {"topic": "x"}),
                                   ("DELETE", "/api/topics/acl", None), ("DELETE", f"/api/nodes/{cluster.node(0)}",
                                                                         {"topic": "acl"})):
            answer = httpx.request(method, admin.url + path, json=body, headers=headers)
            assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"}), (method, path, headers)
    assert nsqd_stats(cluster, 0, "acl")["channels"][0]["paused"] is False
    assert httpx.get(f"{admin.url}/api/topics/acl").status_code == 200  # reading needs no admin
    answer = httpx.post(f"{admin.url}/api/topics/acl/c", json=action, headers={"X-Auth-User": "carol"})
    assert answer.json() == {"message": ""}
    assert nsqd_stats(cluster, 0, "acl")["channels"][0]["paused"] is True


def test_pages_hide_actions_from_non_admins(cluster, start_admin):
    topic_on(cluster, "hidden", "c")
    admin = start_admin("--admin-user=alice")
    for path in ("/topics/hidden", "/topics/hidden/c", "/lookup", f"/nodes/{cluster.node(0)}"):
        visitor = httpx.get(admin.url + path).text
        assert 'name="action"' not in visitor and "Create a topic" not in visitor
        owner = httpx.get(admin.url + path, headers={"X-Forwarded-User": "alice"}).text
        assert 'name="action"' in owner or "Create a topic" in owner


def test_page_forms_refuse_non_admins(cluster, start_admin):
    topic_on(cluster, "formacl", "c")
    admin = start_admin("--admin-user=alice")
    with httpx.Client(base_url=admin.url) as browser:
        browser.get("/topics/formacl/c", headers={"X-Forwarded-User": "alice"})  # gets the CSRF cookie
        token = browser.cookies["nsqadmin_csrf"]
        answer = browser.post("/topics/formacl/c", data={"csrf": token, "action": "pause", "confirm": "yes"})
        assert answer.status_code == 403 and "admin users may change the cluster" in answer.text
        answer = browser.post(f"/nodes/{cluster.node(0)}", data={"csrf": token, "action": "tombstone",
                                                                  "topic": "formacl", "confirm": "yes"})
        assert answer.status_code == 403 and "admin users may change the cluster" in answer.text
    assert nsqd_stats(cluster, 0, "formacl")["channels"][0]["paused"] is False


# -- notifications --------------------------------------------------------------------------


def test_every_action_is_notified_with_nsq_fields(cluster, start_admin):
    topic_on(cluster, "noted", "c")
    sink = RecordingEndpoint()
    admin = start_admin(f"--notification-http-endpoint={sink.url}")
    credentials = base64.b64encode(b"dana:secret").decode()
    headers = {"Authorization": f"Basic {credentials}", "User-Agent": "ops-script/2"}
    calls = [("POST", "/api/topics/noted/c", {"action": "pause"}), ("POST", "/api/topics/noted/c", {"action": "unpause"}),
             ("POST", "/api/topics/noted/c", {"action": "empty"}), ("POST", "/api/topics/noted", {"action": "pause"}),
             ("POST", "/api/topics/noted", {"action": "unpause"}), ("POST", "/api/topics/noted", {"action": "empty"}),
             ("POST", "/api/topics", {"topic": "noted2", "channel": "x"}), ("DELETE", "/api/topics/noted/c", None),
             ("DELETE", f"/api/nodes/{cluster.node(1)}", {"topic": "noted"}), ("DELETE", "/api/topics/noted", None)]
    for method, path, body in calls:
        assert httpx.request(method, admin.url + path, json=body, headers=headers).status_code == 200
    received = sink.wait_for(11)
    assert sorted(n["action"] for n in received) == sorted([
        "pause_channel", "unpause_channel", "empty_channel", "pause_topic", "unpause_topic", "empty_topic",
        "create_topic", "create_channel", "delete_channel", "tombstone_topic_producer", "delete_topic"])
    pause = next(n for n in received if n["action"] == "pause_channel")
    assert set(pause) == NOTIFICATION_KEYS | {"channel", "user"}
    assert (pause["topic"], pause["channel"], pause["user"], pause["user_agent"], pause["via"]) == \
        ("noted", "c", "dana", "ops-script/2", socket.gethostname())
    assert pause["url"] == f"{admin.url}/api/topics/noted/c"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", pause["remote_ip"]) and abs(pause["timestamp"] - time.time()) < 60
    tombstone = next(n for n in received if n["action"] == "tombstone_topic_producer")
    assert tombstone["node"] == cluster.node(1) and "channel" not in tombstone
    assert next(n for n in received if n["action"] == "create_channel")["topic"] == "noted2"
    assert all(request["headers"]["Content-Type"] == "application/json" for request in sink.requests)
    sink.close()


def test_a_slow_endpoint_never_delays_the_operator(cluster, start_admin):
    topic_on(cluster, "slowly", "c")
    sink = RecordingEndpoint(delay=4.0)  # twice the bound below: a loaded machine's margin
    admin = start_admin(f"--notification-http-endpoint={sink.url}")
    started = time.monotonic()
    assert httpx.post(f"{admin.url}/api/topics/slowly/c", json={"action": "pause"}).status_code == 200
    assert time.monotonic() - started < 2.0
    assert sink.wait_for(1)[0]["action"] == "pause_channel"
    sink.close()


def test_a_dead_endpoint_is_logged_not_fatal(cluster, start_admin):
    topic_on(cluster, "unheard", "c")
    sink = RecordingEndpoint()
    sink.close()  # nothing listens there any more
    admin = start_admin(f"--notification-http-endpoint={sink.url}")
    assert httpx.post(f"{admin.url}/api/topics/unheard/c", json={"action": "pause"}).json() == {"message": ""}
    wait_for(lambda: "failed to POST notification" in admin.log(), what="the failure logged")


# -- /config from a CIDR --------------------------------------------------------------------


def test_config_only_from_the_allowed_network(start_admin):
    outside = start_admin("--allow-config-from-cidr=10.0.0.0/8")
    for method in ("GET", "PUT"):
        answer = httpx.request(method, f"{outside.url}/config/log_level", content=b"debug")
        assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"})
    inside = start_admin("--allow-config-from-cidr=127.0.0.0/30")
    assert httpx.get(f"{inside.url}/config/allow_config_from_cidr").text == "127.0.0.0/30"  # V1: strings go raw
    open_to_all = start_admin("--allow-config-from-cidr=")
    assert httpx.get(f"{open_to_all.url}/config/log_level").json() == 2


# -- --base-path ----------------------------------------------------------------------------


def test_everything_lives_under_the_base_path(cluster, start_admin):
    topic_on(cluster, "based", "c")
    admin = start_admin("--base-path=admin/")
    base = f"{admin.url}/admin"
    assert httpx.get(f"{base}/ping").text == "OK"
    assert "based" in httpx.get(f"{base}/api/topics").json()["topics"]
    assert httpx.get(f"{base}/api/topics/based/c").json()["channel_name"] == "c"
    assert httpx.get(f"{base}/config/base_path").text == "/admin"
    assert httpx.get(f"{admin.url}/api/topics").status_code == 404
    assert httpx.get(f"{admin.url}/ping").status_code == 404
    for path in ("", "/", "/topics", "/topics/based", "/topics/based/c", "/nodes", "/counter", "/lookup"):
        page = httpx.get(base + path)
        assert page.status_code == 200, path
        links = re.findall(r'(?:href|src|action)="(/[^"]*)"', page.text)
        assert links and all(link.startswith("/admin/") for link in links), (path, links)
    assert httpx.get(f"{base}/static/nsqadmin.css").headers["content-type"].startswith("text/css")
    with httpx.Client(base_url=base) as browser:
        browser.get("/topics/based/c")
        assert browser.cookies.jar and all(cookie.path == "/admin" for cookie in browser.cookies.jar)
        answer = browser.post("/topics/based/c", data={"csrf": browser.cookies["nsqadmin_csrf"], "action": "pause",
                                                       "confirm": "yes"})
        assert answer.status_code == 303 and answer.headers["location"] == "/admin/topics/based/c"
    assert nsqd_stats(cluster, 0, "based")["channels"][0]["paused"] is True
