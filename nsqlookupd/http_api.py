"""nsqlookupd's HTTP API as a Starlette app: NSQ v1.3's routes, parameters and JSON (nsqlookupd/http.go).

V1 conventions and httprouter-like routing come from serving/starlette_v1.py.
"""

import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from common import VERSION
from common.names import is_valid_name
from serving.starlette_v1 import arg, ok, query, response, v1_app
from serving.v1 import HTTPError, text_parts

from .registration_db import channel_registration, keys, subkeys, topic_registration

log = logging.getLogger("nsqlookupd")


def _topic_channel_args(values: dict[str, list[str]]) -> tuple[str, str]:
    """http_api.GetTopicChannelArgs."""
    topic = arg(values, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel = arg(values, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


class LookupAPI:
    def __init__(self, lookupd):
        self.lookupd = lookupd
        self.db = lookupd.db

    async def ping(self, request: Request) -> Response:
        return response(text_parts(200, "OK"))

    async def info(self, request: Request) -> Response:
        return ok({"version": VERSION})

    async def topics(self, request: Request) -> Response:
        return ok({"topics": keys(self.db.find_registrations("topic", "*", ""))})

    async def channels(self, request: Request) -> Response:
        topic = arg(query(request), "topic", "MISSING_ARG_TOPIC")
        return ok({"channels": subkeys(self.db.find_registrations("channel", topic, "*"))})

    async def lookup(self, request: Request) -> Response:
        db = self.db
        topic = arg(query(request), "topic", "MISSING_ARG_TOPIC")
        if not db.find_registrations("topic", topic, ""):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        channels = subkeys(db.find_registrations("channel", topic, "*"))
        producers = db.filter_active(db.find_producers("topic", topic, ""),
                                     self.lookupd.inactive_producer_timeout_ns, self.lookupd.tombstone_lifetime_ns)
        return ok({"channels": channels, "producers": [producer.peer_info.public for producer in producers]})

    async def nodes(self, request: Request) -> Response:
        db, lifetime = self.db, self.lookupd.tombstone_lifetime_ns
        now = db.clock()
        # Tombstoned producers are listed (a lifetime of 0 ignores tombstones), flagged per topic.
        nodes = []
        for client in db.filter_active(db.find_producers("client", "", ""), self.lookupd.inactive_producer_timeout_ns, 0):
            peer = client.peer_info
            topics = [k.key for k in db.lookup_registrations(peer.id) if k.category == "topic" and k.subkey == ""]
            tombstones = []
            for topic in topics:
                tombstoned = False
                for producer in db.find_producers("topic", topic, ""):
                    if producer.peer_info is peer:
                        tombstoned = producer.is_tombstoned(lifetime, now)
                tombstones.append(tombstoned)
            nodes.append({**peer.public, "tombstones": tombstones, "topics": topics})
        return ok({"producers": nodes})

    async def debug(self, request: Request) -> Response:
        data: dict[str, list[dict]] = {}
        for k, producers in self.db.items():
            if not producers:
                continue
            data[f"{k.category}:{k.key}:{k.subkey}"] = [{
                "id": producer.peer_info.id,
                "hostname": producer.peer_info.hostname,
                "broadcast_address": producer.peer_info.broadcast_address,
                "tcp_port": producer.peer_info.tcp_port,
                "http_port": producer.peer_info.http_port,
                "version": producer.peer_info.version,
                "last_update": producer.peer_info.last_update,
                "tombstoned": producer.tombstoned,
                "tombstoned_at": producer.tombstoned_at,
            } for producer in producers.values()]
        return ok(data, sort_keys=True)  # Go marshals maps with their keys sorted

    async def topic_create(self, request: Request) -> Response:
        topic = arg(query(request), "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.db.add_registration(topic_registration(topic))
        return ok()

    async def topic_delete(self, request: Request) -> Response:
        topic = arg(query(request), "topic", "MISSING_ARG_TOPIC")
        for k in self.db.find_registrations("channel", topic, "*"):
            log.info("DB: removing channel(%s) from topic(%s)", k.subkey, topic)
            self.db.remove_registration(k)
        for k in self.db.find_registrations("topic", topic, ""):
            log.info("DB: removing topic(%s)", topic)
            self.db.remove_registration(k)
        return ok()

    async def topic_tombstone(self, request: Request) -> Response:
        values = query(request)
        topic = arg(values, "topic", "MISSING_ARG_TOPIC")
        node = arg(values, "node", "MISSING_ARG_NODE")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        now = self.db.clock()
        for producer in self.db.find_producers("topic", topic, ""):
            if f"{producer.peer_info.broadcast_address}:{producer.peer_info.http_port}" == node:
                producer.tombstone(now)
        return ok()

    async def channel_create(self, request: Request) -> Response:
        topic, channel = _topic_channel_args(query(request))
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        self.db.add_registration(channel_registration(topic, channel))
        log.info("DB: adding topic(%s)", topic)
        self.db.add_registration(topic_registration(topic))
        return ok()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = _topic_channel_args(query(request))
        registrations = self.db.find_registrations("channel", topic, channel)
        if not registrations:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for k in registrations:
            self.db.remove_registration(k)
        return ok()


def build_app(lookupd) -> Starlette:
    api = LookupAPI(lookupd)
    table = [
        ("GET", "/ping", api.ping),
        ("GET", "/info", api.info),
        ("GET", "/debug", api.debug),
        ("GET", "/lookup", api.lookup),
        ("GET", "/topics", api.topics),
        ("GET", "/channels", api.channels),
        ("GET", "/nodes", api.nodes),
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/topic/tombstone", api.topic_tombstone),
    ]
    return v1_app(table, log, redirects=True)
