"""What nsqd does with each V2 command once the parser has validated it (nsqd/protocol_v2.go)."""

import json
import time

from common import VERSION
from common.commands import Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch
from common.errors import ClientError
from common.frames import CLOSE_WAIT, OK
from common.protocol_v2 import CommandParser, Limits, State

DEFAULT_DEFLATE_LEVEL = 6
MAX_DEFLATE_LEVEL = 6


def limits_from(opts) -> Limits:
    return Limits(
        max_body_size=opts.max_body_size,
        max_msg_size=opts.max_msg_size,
        max_rdy_count=opts.max_rdy_count,
        max_req_timeout_ms=round(opts.max_req_timeout * 1000),
    )


class ProtocolV2:
    """Executes one client's commands against the daemon's topics and channels."""

    def __init__(self, nsqd, client):
        self.nsqd = nsqd
        self.client = client
        self.parser = CommandParser(limits_from(nsqd.opts))
        self._handlers = {
            Identify: self.identify, Auth: self.auth, Sub: self.sub, Rdy: self.rdy,
            Fin: self.fin, Req: self.req, Touch: self.touch, Cls: self.cls, Nop: self.nop,
            Pub: self.pub, Mpub: self.mpub, Dpub: self.dpub,
        }

    def execute(self, command) -> None:
        self._handlers[type(command)](command)

    def _set_state(self, state: State) -> None:
        self.client.state = state
        self.parser.state = state

    def identify(self, command: Identify) -> None:
        client = self.client
        client.identify(command.data)
        if not command.data["feature_negotiation"]:
            client.send_response(OK)
            return
        opts = self.nsqd.opts
        answer = {
            "max_rdy_count": opts.max_rdy_count,
            "version": VERSION,
            "max_msg_timeout": round(opts.max_msg_timeout * 1000),
            "msg_timeout": round(client.msg_timeout * 1000),
            "tls_v1": False,
            "deflate": False,
            "deflate_level": DEFAULT_DEFLATE_LEVEL,  # nsqd honours the requested level only with deflate on
            "max_deflate_level": MAX_DEFLATE_LEVEL,
            "snappy": False,
            "sample_rate": client.sample_rate,
            "auth_required": False,
            "output_buffer_size": client.output_buffer_size,
            "output_buffer_timeout": round(client.output_buffer_timeout * 1000),
        }
        client.send_response(json.dumps(answer, separators=(",", ":")).encode())

    def auth(self, command: Auth) -> None:
        raise ClientError("E_AUTH_DISABLED", "AUTH disabled")

    def sub(self, command: Sub) -> None:
        client = self.client
        if client.heartbeat_interval <= 0:
            raise ClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        topic = self.nsqd.get_topic(command.topic)
        channel = topic.get_channel(command.channel)
        limit = self.nsqd.opts.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise ClientError(
                "E_SUB_FAILED", f"SUB failed consumers for {command.topic}:{command.channel} exceeds limit of {limit}")
        channel.add_client(client)
        client.channel = channel
        self._set_state(State.SUBSCRIBED)
        client.send_response(OK)

    def rdy(self, command: Rdy) -> None:
        self.client.set_ready_count(command.count)

    def fin(self, command: Fin) -> None:
        self.client.finish(command.id)

    def req(self, command: Req) -> None:
        self.client.requeue(command.id, command.timeout_ms / 1000)

    def touch(self, command: Touch) -> None:
        self.client.touch(command.id)

    def cls(self, command: Cls) -> None:
        self.client.start_close()
        self._set_state(State.CLOSING)
        self.client.send_response(CLOSE_WAIT)

    def nop(self, command: Nop) -> None:
        pass

    def _published(self, command_name: str, topic: str, count: int, publish) -> None:
        """Run ``publish``; answer OK, or E_<CMD>_FAILED if nsqd is stopping or the disk failed."""
        if self.nsqd.exiting:
            raise ClientError(f"E_{command_name}_FAILED", f"{command_name} failed exiting")
        try:
            publish()
        except OSError as exc:
            raise ClientError(f"E_{command_name}_FAILED", f"{command_name} failed {exc.strerror or exc}") from exc
        counts = self.client.pub_counts
        counts[topic] = counts.get(topic, 0) + count
        self.client.send_response(OK)

    def pub(self, command: Pub) -> None:
        topic = self.nsqd.get_topic(command.topic)
        self._published("PUB", command.topic, 1, lambda: topic.publish([command.body], time.time_ns()))

    def mpub(self, command: Mpub) -> None:
        topic = self.nsqd.get_topic(command.topic)
        self._published("MPUB", command.topic, len(command.bodies),
                        lambda: topic.publish(command.bodies, time.time_ns()))

    def dpub(self, command: Dpub) -> None:
        topic = self.nsqd.get_topic(command.topic)
        self._published("DPUB", command.topic, 1,
                        lambda: topic.publish_deferred(command.body, time.time_ns(), command.defer_ms / 1000))
