"""nsqlookupd's TCP side: one task per nsqd peer speaking the V1 protocol (nsqlookupd/tcp.go,
nsqlookupd/lookup_protocol_v1.go).

Each receive is parsed as a batch and executed without awaiting; the replies go out
in one write. When the connection ends, for whatever reason, the peer is removed
from every registration it made. A failure in one connection ends that connection
only, never the server.
"""

import logging

import trio

from common import VERSION, gojson
from common.errors import ClientError
from common.protocol_v1 import NEED_DATA, OK, Identify, Ping, Register, ServerParser, encode_error, encode_response
from common.goflags import format_duration

from .registration_db import CLIENT, PeerInfo, Producer

log = logging.getLogger("nsqlookupd")

RECEIVE_SIZE = 64 * 1024
CLOSE_TIMEOUT = 1.0
DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError)


class PeerConnection:
    def __init__(self, lookupd, stream, remote_address: str):
        self.lookupd = lookupd
        self.db = lookupd.db
        self.stream = stream
        self.remote_address = remote_address
        self.parser = ServerParser()
        self.peer_info: PeerInfo | None = None

    def __str__(self) -> str:
        return self.remote_address

    async def run(self) -> None:
        log.info("TCP: new client(%s)", self)
        try:
            await self._io_loop()
        except DISCONNECTED as exc:
            log.debug("CLIENT(%s): connection ended: %r", self, exc)
        finally:
            log.info("PROTOCOL(V1): [%s] exiting ioloop", self)
            self._unregister_all()
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_TIMEOUT):
                    await self.stream.aclose()

    async def _io_loop(self) -> None:
        parser = self.parser
        while True:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                err = parser.receive_eof()
                if err is not None:
                    log.error("[%s] - %s", self, err)
                    await self.stream.send_all(encode_error(err))
                return
            parser.receive_data(data)
            replies = []
            fatal = False
            try:
                while (command := parser.next_event()) is not NEED_DATA:
                    replies.append(encode_response(self.execute(command)))
            except ClientError as err:
                log.error("[%s] - %s", self, err)
                replies.append(encode_error(err))
                fatal = True  # every V1 error is fatal
            if replies:
                await self.stream.send_all(b"".join(replies))
            if fatal:
                return

    def execute(self, command) -> bytes:
        if isinstance(command, Ping):
            return self.ping()
        if isinstance(command, Identify):
            return self.identify(command.data)
        if isinstance(command, Register):
            return self.register(command.topic, command.channel)
        return self.unregister(command.topic, command.channel)

    def ping(self) -> bytes:
        peer = self.peer_info
        if peer is not None:  # a PING may come before IDENTIFY
            now = self.db.clock()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("CLIENT(%s): pinged (last ping %s)", peer.id, format_duration((now - peer.last_update) / 1e9))
            peer.last_update = now
        return OK

    def identify(self, info: dict) -> bytes:
        info = dict(info, remote_address=self.remote_address)
        peer = PeerInfo(self.remote_address, last_update=self.db.clock(), **info)
        log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
                 self, peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version)
        self.peer_info = peer
        if self.db.add_producer(CLIENT, Producer(peer)):
            log.info("DB: client(%s) REGISTER category:client key: subkey:", self)
        lookupd = self.lookupd
        return gojson.dumps({
            "tcp_port": lookupd.tcp_port,
            "http_port": lookupd.http_port,
            "version": VERSION,
            "broadcast_address": lookupd.opts.broadcast_address,
            "hostname": lookupd.hostname,
        }, sort_keys=True)  # Go marshals a map: keys sorted

    def register(self, topic: str, channel: str) -> bytes:
        for k in self.db.register(self.peer_info, topic, channel):
            log.info("DB: client(%s) REGISTER category:%s key:%s subkey:%s", self, k.category, k.key, k.subkey)
        return OK

    def unregister(self, topic: str, channel: str) -> bytes:
        removed, unexpected = self.db.unregister(self.peer_info.id, topic, channel)
        for k in unexpected:
            log.warning("client(%s) unexpected UNREGISTER category:%s key:%s subkey:%s", self, k.category, k.key, k.subkey)
        for k in removed:
            log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", self, k.category, k.key, k.subkey)
        return OK

    def _unregister_all(self) -> None:
        """The peer is gone: remove it from every registration (the keys stay)."""
        if self.peer_info is not None:
            for k in self.db.remove_peer(self.peer_info.id):
                log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", self, k.category, k.key, k.subkey)
