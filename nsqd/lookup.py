"""nsqd's side of discovery: its set of nsqlookupd peers (nsqd/lookup.go).

The set comes from --lookupd-tcp-address and changes at run time through
``PUT /config/nsqlookupd_tcp_addresses``. Topic and channel changes are forwarded to
every peer. Before a new topic starts handing messages to its channels, nsqd asks the
connected lookupds which channels that topic has elsewhere in the cluster
(``GET /channels``, all at once, as nsqd's GetTopic through clusterinfo) and creates the
non-ephemeral ones, so no channel misses the topic's first messages; the command that
created the topic is answered after that (nsqd.get_started_topic).

The queries share one client (nsqd/http_get.py), which keeps a connection to each lookupd
between them, as NSQ's does, and closes them when nsqd stops. A failed query is worded as NSQ's
http_api client words it (``got response 404 Not Found "..."``).
"""

import json
import logging
from urllib.parse import urlencode

import trio

from common.goquote import go_quote
from common.names import is_ephemeral
from common.protocol_v1 import Register, Unregister

from .http_get import Answer, HTTPGetError, HTTPGetter, http_url
from .lookup_peer import LookupPeer, command_text

log = logging.getLogger("nsqd")


class ChannelsQueryError(Exception):
    """A lookupd's answer to a channels query that is not a list of channels."""


class Lookup:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.peers: dict[str, LookupPeer] = {}
        self._http = HTTPGetter(nsqd.opts.http_client_connect_timeout, nsqd.opts.http_client_request_timeout)
        self._http_closer_started = False

    def set_addresses(self, addresses: list[str]) -> None:
        """Start peers for new addresses, stop the ones no longer listed."""
        for address in list(self.peers):
            if address not in addresses:
                log.info("LOOKUP(%s): removing peer", address)
                self.peers.pop(address).stop()
        for address in addresses:
            if address not in self.peers:
                log.info("LOOKUP(%s): adding peer", address)
                peer = LookupPeer(address, self.nsqd)
                self.peers[address] = peer
                self.nsqd.spawn(peer.run)
        if addresses and not self._http_closer_started:
            self._http_closer_started = True
            self.nsqd.spawn(self._close_http_at_exit)

    def connected(self) -> bool:
        """Whether any lookupd is connected (and so can be asked about channels)."""
        return any(peer.info for peer in self.peers.values())

    def notify(self, command: Register | Unregister) -> None:
        """Forward a registration change to every peer, logged per peer as nsqd's lookupLoop does;
        a draining nsqd registers nothing (nsqd/drain.py)."""
        if self.nsqd.draining and isinstance(command, Register):
            return
        branch = "channel" if command.channel else "topic"
        for peer in self.peers.values():
            log.info("LOOKUPD(%s): %s %s", peer.address, branch, command_text(command))
            peer.command(command)

    async def _close_http_at_exit(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self._http.aclose()

    async def cluster_channels(self, topic: str) -> list[str]:
        """The non-ephemeral channels the connected lookupds know for ``topic``, sorted. The
        lookupds that could not say are named in one warning, as nsqd's GetTopic does."""
        target = f"/channels?{urlencode({'topic': topic})}"
        addresses = [(peer.info["broadcast_address"], peer.info["http_port"])
                     for peer in self.peers.values() if peer.info and peer.info.get("broadcast_address")]
        found: set[str] = set()
        errors: list[str] = []

        async def ask(host: str, port: int) -> None:
            log.info("CI: querying nsqlookupd %s", http_url(host, port, target))
            try:
                found.update(_channels(await self._http.get(host, port, target)))
            except (HTTPGetError, ChannelsQueryError) as exc:
                errors.append(str(exc))

        async with trio.open_nursery() as nursery:
            for host, port in addresses:
                nursery.start_soon(ask, host, port)
        if errors:
            none = "failed to query any nsqlookupd: " if len(errors) == len(addresses) else ""
            log.warning("failed to query nsqlookupd for channels to pre-create for topic %s - %s%s",
                        topic, none, "\n".join(errors))
        return sorted(found)

    async def prepare_topic(self, topic) -> None:
        """Create the topic's channels known to the cluster, then start it. A topic deleted
        meanwhile gets no channels, but starts, so whoever waits for it goes on; nor does a
        channel deleted meanwhile (its files may still be in the way)."""
        with trio.move_on_after(self.nsqd.opts.http_client_request_timeout + 1):
            channels = await self.cluster_channels(topic.name)
            if self.nsqd.topics.get(topic.name) is topic:
                for name in channels:
                    if not self.nsqd.removing(topic.name, name):
                        topic.get_channel(name)
        topic.start()


def _channels(answer: Answer) -> list[str]:
    """The non-ephemeral channels of a lookupd's ``/channels`` answer (NSQ's GETV1 and its JSON)."""
    if answer.status != 200:
        raise ChannelsQueryError(f"got response {answer.status} {answer.reason} {go_quote(answer.body)}")
    try:
        document = json.loads(answer.body)
    except ValueError as exc:
        raise ChannelsQueryError(str(exc)) from exc
    channels = document.get("channels") if isinstance(document, dict) else None
    if not isinstance(channels, list | None):
        raise ChannelsQueryError(f"json: cannot unmarshal {type(channels).__name__} into the channels list")
    return [name for name in channels or [] if isinstance(name, str) and not is_ephemeral(name)]
