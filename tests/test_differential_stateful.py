"""Randomised sessions against NSQ's daemons and ours, side by side (tests/differential_driver.py
compares every answer, every delivery and, after every step, nsqd's /stats or nsqlookupd's
registrations). A difference a machine finds is then written out as a scripted regression test.

For nsqd, a hypothesis state machine opens connections, identifies them, subscribes, sets RDY,
FINs, REQs and TOUCHes what it (or another) was sent, publishes (PUB, MPUB, DPUB, and over HTTP),
pauses, empties and deletes topics and channels, sends commands in the wrong state and hangs up.
What it leaves out, because NSQ itself is not deterministic there: two consumers ready at once on
one channel (which one a message goes to is a race between Go's goroutines; a channel may have
several consumers, one of them with RDY above 0 at a time), several commands in one send where one
frees RDY and the next names the message that frees (a race too), a producer of several topics
(NSQ's /stats shows one of them at random), timers (deferrals and REQ delays are 0 or 10 minutes,
msg_timeout the default minute), sampling, and a consumer leaving with messages in flight (NSQ
waits for their timeout, we requeue at once: README), so a consumer requeues what it holds first.

For nsqlookupd, a machine has nsqd peers identify, register, unregister, ping and go, and uses
the HTTP API's changes (create, delete, tombstone) and queries.

In CI the run is small and derandomised (the same steps every time). To explore, set
NSQ_DIFFERENTIAL_EXAMPLES (e.g. 200) and optionally NSQ_DIFFERENTIAL_STEPS (default 50): the
examples are then random, and hypothesis prints the steps of any difference it finds.
"""

import json
import os
import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from .differential_driver import command, identify, mpub_body, nsqd_pair_fixture, raw
from .differential_driver import pair  # noqa: F401 (a fixture the test uses)
from .differential_lookupd_driver import lookupd_pair  # noqa: F401 (a fixture the test uses)
from .go_nsq import requires_go

pytestmark = requires_go

EXPLORE = int(os.environ.get("NSQ_DIFFERENTIAL_EXAMPLES", "0"))
STEPS = int(os.environ.get("NSQ_DIFFERENTIAL_STEPS", "50")) if EXPLORE else 30
SETTINGS = settings(max_examples=EXPLORE or 5, stateful_step_count=STEPS, derandomize=not EXPLORE, deadline=None,
                    database=None, suppress_health_check=list(HealthCheck))

TOPICS = ["s0", "s1", "s2#ephemeral"]
CHANNELS = ["a", "b", "e#ephemeral"]
MAX_CONNECTIONS = 4
IDENTIFIES = [
    None,
    {"output_buffer_timeout": 25},
    {"output_buffer_size": -1, "client_id": "unbuffered", "hostname": "h.example", "user_agent": "ua <x>/1"},
    {"feature_negotiation": True, "output_buffer_timeout": 25, "msg_timeout": 120000},
    {"feature_negotiation": True, "snappy": True, "output_buffer_timeout": 25},
    {"feature_negotiation": True, "deflate": True, "deflate_level": 3, "output_buffer_size": -1},
    {"feature_negotiation": True, "deflate": True, "snappy": True},  # refused: fatal
    {"heartbeat_interval": -1, "output_buffer_timeout": 25},  # SUB is then refused
    {"msg_timeout": 999},  # refused: fatal
]
BAD_COMMANDS = [b"BOGUS\n", b"PUB bad!topic\n", b"SUB s0\n", b"IDENTIFY\n\x00\x00\x00\x00", b"RDY x\n",
                b"FIN short\n", b"MPUB s0\n\x00\x00\x00\x00", b"PUB s0\n\xff\xff\xff\xff", b"AUTH\n\x00\x00\x00\x01x",
                b"REQ 0123456789abcdef -1\n", b"TOUCH\n"]
BODIES = st.binary(min_size=1, max_size=20)
DELAYS = st.sampled_from([0, 600_000])

nsqd_pair = nsqd_pair_fixture()


class Session:
    """The machine's view of one test connection."""

    def __init__(self):
        self.state = "init"
        self.channel: tuple[str, str] | None = None
        self.publishes_to: str | None = None
        self.ready = 0


class NsqdSessions(RuleBasedStateMachine):
    def __init__(self, pair):
        super().__init__()
        self.pair = pair
        self.sessions: dict[str, Session] = {}
        self.opened = 0

    @initialize()
    def start_clean(self):
        self.pair.end_test()  # the last example's connections go, both daemons stay

    def teardown(self):
        self.pair.end_test()

    # -- what the model knows -------------------------------------------------------------

    def _open(self, *states: str) -> list[str]:
        return sorted(name for name, session in self.sessions.items() if not states or session.state in states)

    def _ready_elsewhere(self, name: str) -> bool:
        """Another consumer of ``name``'s channel has RDY above 0."""
        channel = self.sessions[name].channel
        return any(session.channel == channel and session.ready for other, session in self.sessions.items()
                   if other != name)

    @invariant()
    def forget_closed_connections(self):
        for name in list(self.sessions):
            if self.pair.go.conns[name].closed:
                del self.sessions[name]

    def _send(self, name: str, wire) -> None:
        self.pair.send(name, wire)

    # -- connections ------------------------------------------------------------------------

    @precondition(lambda self: len(self.sessions) < MAX_CONNECTIONS)
    @rule(settings=st.sampled_from(IDENTIFIES))
    def connect(self, settings):
        name = f"c{self.opened}"
        self.opened += 1
        self.pair.connect(name)
        self.sessions[name] = Session()
        if settings is not None:
            self._send(name, identify(**settings))

    @precondition(lambda self: self._open("init"))
    @rule(data=st.data(), topic=st.sampled_from(TOPICS), channel=st.sampled_from(CHANNELS))
    def subscribe(self, data, topic, channel):
        name = data.draw(st.sampled_from(self._open("init")))
        self._send(name, command(f"SUB {topic} {channel}"))
        if not self.pair.go.conns[name].closed:
            self.sessions[name].state = "subscribed"
            self.sessions[name].channel = (topic, channel)

    @precondition(lambda self: self._open("subscribed"))
    @rule(data=st.data(), count=st.sampled_from([0, 1, 3, 10]))
    def ready(self, data, count):
        name = data.draw(st.sampled_from(self._open("subscribed")))
        if count and self._ready_elsewhere(name):
            return  # one ready consumer a channel: NSQ's choice between two is a race
        self._send(name, command(f"RDY {count}"))
        self.sessions[name].ready = count

    def _held(self, data, name: str) -> str:
        """Mostly a message this connection was sent, else one another was (or none was)."""
        own = list(self.pair.go.conns[name].delivered)
        others = [message for conn in self.pair.go.conns.values() for message in conn.delivered]
        if own and data.draw(st.booleans()):
            return data.draw(st.sampled_from(own))
        return data.draw(st.sampled_from([*others, "m99"]))

    @precondition(lambda self: self._open("subscribed", "closing"))
    @rule(data=st.data(), verb=st.sampled_from(["FIN", "TOUCH", "REQ"]), delay=DELAYS)
    def answer_a_message(self, data, verb, delay):
        name = data.draw(st.sampled_from(self._open("subscribed", "closing")))
        message = self._held(data, name)
        self._send(name, command(f"{verb} <{message}>" + (f" {delay}" if verb == "REQ" else "")))

    @precondition(lambda self: self._open("subscribed"))
    @rule(data=st.data())
    def close_softly(self, data):
        name = data.draw(st.sampled_from(self._open("subscribed")))
        self._send(name, command("CLS"))
        self.sessions[name].state = "closing"
        self.sessions[name].ready = 0

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def nop(self, data):
        self._send(data.draw(st.sampled_from(self._open())), command("NOP"))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), line=st.sampled_from(BAD_COMMANDS))
    def send_something_bad(self, data, line):
        name = data.draw(st.sampled_from(self._open()))
        self.pair.release(name)
        self._send(name, raw(line))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def hang_up(self, data):
        name = data.draw(st.sampled_from(self._open()))
        self.pair.hang_up(name)
        del self.sessions[name]

    # -- publishing ---------------------------------------------------------------------------

    def _publisher(self, data) -> tuple[str, str]:
        name = data.draw(st.sampled_from(self._open()))
        session = self.sessions[name]
        if session.publishes_to is None:  # one topic a producer: NSQ's /stats shows one of several at random
            session.publishes_to = data.draw(st.sampled_from(TOPICS))
        return name, session.publishes_to

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), body=BODIES)
    def pub(self, data, body):
        name, topic = self._publisher(data)
        self._send(name, command(f"PUB {topic}", body))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), bodies=st.lists(BODIES, min_size=1, max_size=5))
    def mpub(self, data, bodies):
        name, topic = self._publisher(data)
        self._send(name, command(f"MPUB {topic}", mpub_body(*bodies)))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), body=BODIES, delay=DELAYS)
    def dpub(self, data, body, delay):
        name, topic = self._publisher(data)
        self._send(name, command(f"DPUB {topic} {delay}", body))

    @rule(topic=st.sampled_from(TOPICS), bodies=st.lists(BODIES.filter(lambda body: b"\n" not in body), min_size=1,
                                                          max_size=3), delay=DELAYS)
    def http_publish(self, topic, bodies, delay):
        quoted = topic.replace("#", "%23")
        if len(bodies) == 1:
            self.pair.http("POST", f"/pub?topic={quoted}" + (f"&defer={delay}" if delay else ""), bodies[0])
        else:
            self.pair.http("POST", f"/mpub?topic={quoted}", b"\n".join(bodies))

    # -- administration -------------------------------------------------------------------------

    @rule(action=st.sampled_from(["create", "pause", "unpause", "empty", "delete"]), topic=st.sampled_from(TOPICS))
    def topic_action(self, action, topic):
        self.pair.http("POST", f"/topic/{action}?topic={topic.replace('#', '%23')}")
        if action == "delete":
            self._consumers_gone(lambda key: key[0] == topic)

    @rule(action=st.sampled_from(["create", "pause", "unpause", "empty", "delete"]), topic=st.sampled_from(TOPICS),
          channel=st.sampled_from(CHANNELS))
    def channel_action(self, action, topic, channel):
        query = f"topic={topic}&channel={channel}".replace("#", "%23")
        self.pair.http("POST", f"/channel/{action}?{query}")
        if action == "delete":
            self._consumers_gone(lambda key: key == (topic, channel))

    def _consumers_gone(self, deleted) -> None:
        """nsqd closes the connections of a deleted channel's consumers."""
        for name in self._open():
            channel = self.sessions[name].channel
            if channel is not None and deleted(channel):
                self.pair.hang_up(name, release=False)
                del self.sessions[name]

    @rule(query=st.sampled_from(["?format=json&topic=s0", "?format=json&topic=s1&channel=a", "?topic=s0",
                                 "?format=json&include_clients=false", "?format=json&topic=s2%23ephemeral"]))
    def stats_query(self, query):
        self.pair.http("GET", f"/stats{query}")


def test_random_sessions_give_the_same_answers_deliveries_and_stats(pair):
    run_state_machine_as_test(lambda: NsqdSessions(pair), settings=SETTINGS)


# -- nsqlookupd --------------------------------------------------------------------------------------

PEERS = [{"broadcast_address": "n1", "hostname": "h1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"},
         {"broadcast_address": "n2", "hostname": "h2", "tcp_port": 4250, "http_port": 4251, "version": "1.3.0"},
         {"broadcast_address": "n1", "hostname": "h1", "tcp_port": 4150, "http_port": 4151, "version": "1.2.1"},
         {"broadcast_address": "", "tcp_port": 1, "http_port": 2, "version": "x"}]  # refused: missing fields
LOOKUP_TOPICS = ["t0", "t1", "t2#ephemeral"]
LOOKUP_CHANNELS = ["", "a", "b#ephemeral"]


class LookupdSessions(RuleBasedStateMachine):
    """nsqd peers registering and going, and the HTTP API's changes and queries."""

    def __init__(self, pair):
        super().__init__()
        self.pair = pair
        self.peers: set[str] = set()
        self.opened = 0

    @initialize()
    def start_clean(self):
        self.pair.end_test()

    def teardown(self):
        self.pair.end_test()

    @invariant()
    def forget_closed_peers(self):
        self.peers = {name for name in self.peers if not self.pair.go.conns[name].closed}

    @precondition(lambda self: len(self.peers) < 3)
    @rule(info=st.sampled_from(PEERS))
    def connect(self, info):
        name = f"p{self.opened}"
        self.opened += 1
        self.pair.connect(name)
        self.peers.add(name)
        body = json.dumps(info).encode()
        self.pair.send(name, b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)

    @precondition(lambda self: self.peers)
    @rule(data=st.data(), verb=st.sampled_from(["REGISTER", "UNREGISTER"]), topic=st.sampled_from(LOOKUP_TOPICS),
          channel=st.sampled_from(LOOKUP_CHANNELS))
    def registration(self, data, verb, topic, channel):
        name = data.draw(st.sampled_from(sorted(self.peers)))
        self.pair.send(name, f"{verb} {topic} {channel}".strip().encode() + b"\n")

    @precondition(lambda self: self.peers)
    @rule(data=st.data(), line=st.sampled_from([b"PING\n", b"PING\n", b"BOGUS\n", b"REGISTER bad!\n", b"\n"]))
    def other_command(self, data, line):
        self.pair.send(data.draw(st.sampled_from(sorted(self.peers))), line)

    @precondition(lambda self: self.peers)
    @rule(data=st.data())
    def hang_up(self, data):
        name = data.draw(st.sampled_from(sorted(self.peers)))
        self.pair.hang_up(name)
        self.peers.discard(name)

    @rule(action=st.sampled_from(["/topic/create", "/topic/delete", "/channel/create", "/channel/delete",
                                  "/topic/tombstone"]),
          topic=st.sampled_from(LOOKUP_TOPICS), channel=st.sampled_from(LOOKUP_CHANNELS[1:]),
          node=st.sampled_from(["n1:4151", "n2:4251", "n3:1"]))
    def http_action(self, action, topic, channel, node):
        query = f"topic={topic}&channel={channel}&node={node}".replace("#", "%23")
        self.pair.http("POST", f"{action}?{query}")

    @rule(path=st.sampled_from(["/lookup?topic=t0", "/lookup?topic=t2%23ephemeral", "/channels?topic=t1",
                                "/lookup?topic=nope", "/info"]))
    def http_query(self, path):
        self.pair.http("GET", path)


def test_random_peers_and_requests_give_the_same_registrations(lookupd_pair):
    run_state_machine_as_test(lambda: LookupdSessions(lookupd_pair), settings=SETTINGS)
