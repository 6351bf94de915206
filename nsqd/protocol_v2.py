"""What nsqd does with each V2 command once the parser has validated it (nsqd/protocol_v2.go).

Commands run synchronously, except where nsqd must wait: IDENTIFY when it upgrades the
connection (TLS, snappy, deflate), AUTH (a request to the auth server) and, with AUTH
enabled, PUB/MPUB/DPUB/SUB (whose authorization may need asking again after its TTL),
and a PUB/MPUB/DPUB/SUB that creates its topic (answered once the topic has started, as
nsqd's GetTopic returns only then: nsqd.get_started_topic). Those return a coroutine
that the connection's reader awaits before it parses on.
With AUTH enabled the check comes after the parser has read the whole command, body
included, except MPUB's: as in nsqd, its topic is checked (and got, so created) as soon
as its line is read (the parser's MpubTopic), before the body.

PUB, MPUB and DPUB are nsqd's one publish operation (NSQD.publish, which the HTTP API's
/pub and /mpub use too); what is theirs here is the answer. With --sync-every=1 a publish
that wrote to a disk queue is answered only once an fsync covers the write
(nsqd/group_commit.py). Its OK is held, and so is every later answer of the connection, to
keep them in the commands' order; publishes still execute meanwhile, so the commands of
one received batch share the fsync. The connection calls ``answer_publishes`` when the
batch is done and before it sends an error.
"""

import json
import logging
from collections import deque

from common import VERSION
from common.commands import Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch
from common.compression import DeflateCodec, SnappyCodec
from common.errors import ClientError
from common.frames import CLOSE_WAIT, OK
from common.goquote import go_quote
from common.protocol_v2 import CommandParser, FinRun, Limits, MpubTopic, State

from .auth import AuthError, AuthQuery
from .group_commit import PublishFailed, SyncRound
from .options import TLS_NOT_REQUIRED

log = logging.getLogger("nsqd")

DEFAULT_DEFLATE_LEVEL = 6
PUBLISHES = (Pub, MpubTopic, Mpub, Dpub)


def limits_from(opts) -> Limits:
    return Limits(
        max_body_size=opts.max_body_size,
        max_msg_size=opts.max_msg_size,
        max_rdy_count=opts.max_rdy_count,
        max_req_timeout_ms=round(opts.max_req_timeout * 1000),
    )


class ProtocolV2:
    """Executes one client's commands against the daemon's topics and channels."""

    def __init__(self, nsqd, client, upgrade, identified):
        """``upgrade(tls, codec)``: the connection's coroutine that changes its layers;
        ``identified()``: told after an IDENTIFY has been applied."""
        self.nsqd = nsqd
        self.client = client
        self.upgrade = upgrade
        self.identified = identified
        self.parser = CommandParser(limits_from(nsqd.opts), tls_required=nsqd.opts.tls_required != TLS_NOT_REQUIRED,
                                    fin_runs=True, mpub_topics=True)
        # (command name, SyncRound or None) of the publishes whose OK is held (for an fsync, or
        # behind one that is), in order; the connection reads whether any is (truthy), for every
        # read, so it is a plain attribute rather than a property (a call a read)
        self.unanswered: deque = deque()
        self._handlers = {
            Identify: self.identify, Auth: self.auth, Sub: self.sub, Rdy: self.rdy,
            Fin: self.fin, FinRun: self.fin_run, Req: self.req, Touch: self.touch, Cls: self.cls, Nop: self.nop,
            Pub: self.pub, MpubTopic: self.mpub_topic, Mpub: self.mpub, Dpub: self.dpub,
        }
        if nsqd.auth_servers is not None:
            for command_type, name in ((Sub, "SUB"), (Pub, "PUB"), (MpubTopic, "MPUB"), (Mpub, "MPUB"), (Dpub, "DPUB")):
                self._handlers[command_type] = self._authorized(name, self._handlers[command_type])

    def execute(self, command):
        """Run a command; a coroutine to await before the next one, or None."""
        handler = self._handlers[type(command)]
        if self.unanswered and not isinstance(command, PUBLISHES):
            return self._after_answers(handler, command)
        return handler(command)

    async def _after_answers(self, handler, command) -> None:
        await self.answer_publishes()
        pending = handler(command)
        if pending is not None:
            await pending

    async def answer_publishes(self) -> None:
        """Send the held OKs, in order, as their fsyncs complete. A failed fsync fails the
        first publish still held with E_<CMD>_FAILED (fatal: the connection closes)."""
        unanswered = self.unanswered
        while unanswered:
            name, sync_round = unanswered[0]
            if sync_round is not None:
                try:
                    await sync_round.wait()
                except OSError as exc:
                    unanswered.clear()
                    raise ClientError(f"E_{name}_FAILED", f"{name} failed {exc.strerror or exc}") from exc
            unanswered.popleft()
            self.client.send_response(OK)

    def refuse(self, err: ClientError) -> None:
        """Tell the client what it did wrong (the connection closes after a fatal error)."""
        log.log(logging.ERROR if err.fatal else logging.INFO, "client %s: %s", self.client.remote_address, err)
        self.client.send_error(err)

    def identify(self, command: Identify):
        client, data = self.client, command.data
        client.identify(data)
        self.parser.heartbeats = client.heartbeat_interval > 0
        self.identified()
        if not data["feature_negotiation"]:
            client.send_response(OK)
            return None
        opts = self.nsqd.opts
        tls = self.nsqd.tls_context is not None and data["tls_v1"]
        deflate = opts.deflate and data["deflate"]
        snappy = opts.snappy and data["snappy"]
        # nsqd honours the requested level only with deflate on
        level = min(data["deflate_level"] if deflate and data["deflate_level"] > 0 else DEFAULT_DEFLATE_LEVEL,
                    opts.max_deflate_level)
        if deflate and snappy:
            raise ClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
        answer = {
            "max_rdy_count": opts.max_rdy_count,
            "version": VERSION,
            "max_msg_timeout": round(opts.max_msg_timeout * 1000),
            "msg_timeout": round(client.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": client.sample_rate,
            "auth_required": self.nsqd.auth_servers is not None,
            "output_buffer_size": client.output_buffer_size,
            "output_buffer_timeout": round(client.output_buffer_timeout * 1000),
        }
        client.send_response(json.dumps(answer, separators=(",", ":")).encode())
        codec = SnappyCodec() if snappy else DeflateCodec(level) if deflate else None
        if tls or codec is not None:
            return self.upgrade(tls, codec)
        return None

    # -- AUTH --------------------------------------------------------------------------

    def auth(self, command: Auth):
        if self.client.authed:
            raise ClientError("E_INVALID", "AUTH already set")
        if self.nsqd.auth_servers is None:
            raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
        return self._auth(command.secret)

    async def _auth(self, secret: bytes) -> None:
        client = self.client
        client.set_auth_secret(secret)
        await self._query_auth()
        if not client.authed:
            raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        state = client.auth_state
        answer = {"identity": state.identity, "identity_url": state.identity_url,
                  "permission_count": len(state.authorizations)}
        client.send_response(json.dumps(answer, separators=(",", ":")).encode())

    async def _query_auth(self) -> None:
        client = self.client
        tls = client.tls
        query = AuthQuery(client.remote_ip, tls is not None, client.auth_secret, tls.common_name if tls else "")
        try:
            client.set_auth_state(await self.nsqd.auth_servers.query(query))
        except AuthError as exc:
            # the auth server's troubles are not the client's business
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client.remote_address, exc)
            raise ClientError("E_AUTH_FAILED", "AUTH failed") from None

    def _authorized(self, name: str, handler):
        """``handler`` behind nsqd's CheckAuth."""
        async def check_then_run(command) -> None:
            await self._check_auth(name, command.topic, getattr(command, "channel", ""))
            pending = handler(command)
            if pending is not None:
                await pending
        return check_then_run

    async def _check_auth(self, name: str, topic: str, channel: str) -> None:
        client = self.client
        if not client.authed:
            raise ClientError("E_AUTH_FIRST", f"AUTH required before {name}")
        if client.auth_state.expired():
            await self._query_auth()
        if not client.auth_state.allows(topic, channel):
            raise ClientError("E_UNAUTHORIZED",
                              f"AUTH failed for {name} on {go_quote(topic)} {go_quote(channel)}")

    def sub(self, command: Sub):
        client = self.client
        topic = self.nsqd.topics.get(command.topic)
        if self.nsqd.draining and (topic is None or not self.nsqd.drain.accepts_channel(topic, command.channel)):
            raise ClientError("E_SUB_FAILED", "SUB failed draining")  # beyond NSQ: nsqd/drain.py
        if topic is None or self.nsqd.removing(command.topic, command.channel):
            return self._after_topic_start(self.sub, command)
        channel = topic.get_channel(command.channel)
        limit = self.nsqd.opts.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise ClientError(
                "E_SUB_FAILED", f"SUB failed consumers for {command.topic}:{command.channel} exceeds limit of {limit}")
        channel.add_client(client)
        client.subscribe(channel)
        self.parser.state = State.SUBSCRIBED
        client.send_response(OK)

    def rdy(self, command: Rdy) -> None:
        self.client.set_ready_count(command.count)

    def fin(self, command: Fin) -> None:
        self.client.finish(command.id)

    def fin_run(self, command: FinRun) -> None:
        """FIN each ID in turn; one that fails gets its error where a lone FIN would, after the
        messages the FINs before it freed, and the rest go on."""
        ids = command.ids
        while ids:
            done = self.client.finish_many(ids)
            if done == len(ids):
                return
            try:
                self.client.finish(ids[done])
            except ClientError as err:
                self.refuse(err)
            ids = ids[done + 1:]

    def req(self, command: Req) -> None:
        self.client.requeue(command.id, command.timeout_ms / 1000)

    def touch(self, command: Touch) -> None:
        self.client.touch(command.id)

    def cls(self, command: Cls) -> None:
        self.client.start_close()
        self.parser.state = State.CLOSING
        self.client.send_response(CLOSE_WAIT)

    def nop(self, command: Nop) -> None:
        pass

    def _publish(self, command_name: str, topic: str, bodies: list[bytes], delay: float = 0.0):
        """nsqd's publish (NSQD.publish); the OK now, or held until its disk writes are
        fsynced if they must be, or once the topic this creates has started. E_<CMD>_FAILED
        if nsqd is stopping or the disk failed."""
        try:
            waiting = self.nsqd.publish(topic, bodies, delay)
        except PublishFailed as failed:
            raise _publish_failed(command_name, failed) from None
        if waiting is not None and not isinstance(waiting, SyncRound):
            return self._published_once_started(command_name, topic, len(bodies), waiting)
        self._published(command_name, topic, len(bodies), waiting)
        return None

    async def _published_once_started(self, command_name: str, topic: str, count: int, waiting) -> None:
        try:
            sync_round = await waiting
        except PublishFailed as failed:
            raise _publish_failed(command_name, failed) from None
        self._published(command_name, topic, count, sync_round)

    def _published(self, command_name: str, topic: str, count: int, sync_round: SyncRound | None) -> None:
        self.client.published(topic, count)
        if sync_round is None and not self.unanswered:
            self.client.send_response(OK)
        else:
            self.unanswered.append((command_name, sync_round))

    async def _after_topic_start(self, handler, command) -> None:
        """``handler(command)`` once the topic it creates has started: nsqd answers the
        command that creates a topic only then (nsqd.get_started_topic); and once the files
        of a channel of that name deleted a moment ago are out of the way."""
        await self.nsqd.get_started_topic(command.topic)
        await self.nsqd.removed(command.topic, command.channel)
        pending = handler(command)  # the topic may have gone meanwhile: then it is created again
        if pending is not None:
            await pending

    def pub(self, command: Pub):
        return self._publish("PUB", command.topic, [command.body])

    def mpub_topic(self, command: MpubTopic):
        """MPUB's topic, got (so created, and started) before its body is read, as NSQ's MPUB
        does (after the auth check)."""
        if command.topic not in self.nsqd.topics and not self.nsqd.draining:  # draining: MPUB refuses
            return self.nsqd.get_started_topic(command.topic)
        return None

    def mpub(self, command: Mpub):
        return self._publish("MPUB", command.topic, command.bodies)

    def dpub(self, command: Dpub):
        return self._publish("DPUB", command.topic, [command.body], command.defer_ms / 1000)


def _publish_failed(command_name: str, failed: PublishFailed) -> ClientError:
    return ClientError(f"E_{command_name}_FAILED", f"{command_name} failed {failed.reason}")
