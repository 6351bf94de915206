"""Randomised sessions against NSQ's nsqd and ours, side by side: a hypothesis state machine opens
connections, identifies them, subscribes, sets RDY, FINs, REQs and TOUCHes what it was sent,
publishes (PUB, MPUB, DPUB, and over HTTP), pauses, empties and deletes topics and channels, sends
commands in the wrong state and hangs up, while the driver (tests/differential_driver.py) compares
every answer, every delivery and /stats after every step. A difference it finds is then written
out as a scripted regression test in test_differential_nsqd_tcp.py or test_differential_nsqd_http.py.

What the machine leaves out, because NSQ itself is not deterministic there: two consumers ready on
one channel (which one a message goes to is a race between Go's goroutines), several commands in
one send where one frees RDY and the next names the message that frees (a race too), a producer
of several topics (NSQ's /stats shows one of them at random), timers (deferrals and REQ delays are
0 or 10 minutes, msg_timeout the default minute), sampling, and a consumer leaving with messages in
flight (NSQ waits for their timeout, we requeue at once: README), so a consumer requeues what it
holds before it goes.

In CI the run is small and derandomised (the same steps every time). To explore, set
NSQ_DIFFERENTIAL_EXAMPLES (e.g. 200) and optionally NSQ_DIFFERENTIAL_STEPS (default 50): the
examples are then random, and hypothesis prints the steps of any difference it finds.
"""

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from .differential_driver import command, identify, mpub_body, nsqd_pair_fixture, raw
from .differential_driver import pair  # noqa: F401 (a fixture the test uses)
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
                b"FIN short\n", b"MPUB s0\n\x00\x00\x00\x00", b"PUB s0\n\xff\xff\xff\xff"]
BODIES = st.binary(min_size=1, max_size=20)
DELAYS = st.sampled_from([0, 600_000])

nsqd_pair = nsqd_pair_fixture()


class Session:
    """The machine's view of one test connection."""

    def __init__(self):
        self.state = "init"
        self.channel: tuple[str, str] | None = None
        self.publishes_to: str | None = None


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

    def _occupied(self) -> set[tuple[str, str]]:
        return {session.channel for session in self.sessions.values() if session.channel is not None}

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
        if (topic, channel) in self._occupied():
            return  # one consumer a channel: NSQ's choice between two ready ones is a race
        name = data.draw(st.sampled_from(self._open("init")))
        self._send(name, command(f"SUB {topic} {channel}"))
        if not self.pair.go.conns[name].closed:
            self.sessions[name].state = "subscribed"
            self.sessions[name].channel = (topic, channel)

    @precondition(lambda self: self._open("subscribed"))
    @rule(data=st.data(), count=st.sampled_from([0, 1, 3, 10]))
    def ready(self, data, count):
        self._send(data.draw(st.sampled_from(self._open("subscribed"))), command(f"RDY {count}"))

    def _held(self, data, name: str) -> str:
        return data.draw(st.sampled_from([*self.pair.go.conns[name].delivered, "m99"]))

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
