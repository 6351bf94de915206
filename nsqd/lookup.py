"""nsqd's side of discovery: its set of nsqlookupd peers (nsqd/lookup.go).

The set comes from --lookupd-tcp-address and changes at run time through
``PUT /config/nsqlookupd_tcp_addresses``. Topic and channel changes are forwarded to
every peer. Before a new topic starts handing messages to its channels, nsqd asks the
lookupds which channels that topic has elsewhere in the cluster (``GET /channels``) and
creates them, so no channel misses the topic's first messages.
"""

import logging

import httpx
import trio

from common.names import is_ephemeral

from .lookup_peer import LookupPeer

log = logging.getLogger("nsqd")


class Lookup:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.peers: dict[str, LookupPeer] = {}

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

    def connected(self) -> bool:
        """Whether any lookupd is connected (and so can be asked about channels)."""
        return any(peer.info for peer in self.peers.values())

    def notify(self, command) -> None:
        for peer in self.peers.values():
            peer.command(command)

    async def cluster_channels(self, topic: str) -> list[str]:
        """The non-ephemeral channels the connected lookupds know for ``topic``."""
        opts = self.nsqd.opts
        timeout = httpx.Timeout(opts.http_client_request_timeout, connect=opts.http_client_connect_timeout)
        urls = [f"http://{peer.info['broadcast_address']}:{peer.info['http_port']}/channels"
                for peer in self.peers.values() if peer.info]
        found: list[str] = []
        async with httpx.AsyncClient(timeout=timeout) as client:
            for url in urls:
                try:
                    response = await client.get(url, params={"topic": topic})
                    response.raise_for_status()
                    channels = response.json().get("channels") or []
                except (httpx.HTTPError, ValueError, AttributeError) as exc:
                    log.warning("LOOKUPD: failed to query %s for topic %s channels - %s", url, topic, exc)
                    continue
                found += [name for name in channels if isinstance(name, str) and not is_ephemeral(name)
                          and name not in found]
        return found

    async def prepare_topic(self, topic) -> None:
        """Create the topic's channels known to the cluster, then let it fan out."""
        with trio.move_on_after(self.nsqd.opts.http_client_request_timeout + 1):
            for name in await self.cluster_channels(topic.name):
                topic.get_channel(name)
        topic.start()
