"""Channel pacing (beyond NSQ: --channel-pace, ``POST /channel/pace``): a channel delivers at
most ``pace`` messages a second, whatever its consumers' RDY (nsqio/nsq#387).

NSQ leaves rate limits to each consumer, which cannot bound a channel shared by many of them;
here the channel owns a token bucket, so the bound holds across every consumer of the channel
on this nsqd. The pace is --channel-pace for every channel, or the channel's own, set over
HTTP and kept in nsqd.dat as an extra key of the channel (``"pace"``, messages a second;
NSQ's nsqd ignores it); 0 lifts it.

Theory of operation: the bucket holds at most BURST_SECONDS of tokens (one at least) and
fills at ``pace`` tokens a second; each message handed to a consumer spends one. A paced
channel never lists a consumer as ready for its direct deliveries (nsqd/channel.py): every
message waits in its queue, and ``Channel.client_ready`` hands the consumer to the Pacer,
which delivers from the queue as many as the tokens allow and otherwise keeps the consumer
waiting, in arrival order. A message queued while consumers wait, or tokens running out
while messages do, wakes the pacer's task, which sleeps until the bucket holds a quantum
(TICK_SECONDS of tokens, one at least, so a fast pace wakes at most 1/TICK_SECONDS times a
second) and then deals the tokens to the waiting consumers in turn. Nothing polls: an idle
paced channel costs nothing.

So in any interval of T seconds a channel delivers at most ``pace * T`` messages plus the
bucket (``max(1, pace * BURST_SECONDS)``); messages a screen takes instead (message TTL,
dead letters, nsqd/screen.py) spend no token. Deferred messages, REQs and timeouts come
back through the queue and are paced like the rest. The pace is a maximum: tokens that would
overflow the bucket are lost, so an event loop kept from running for longer than
BURST_SECONDS delivers less.
"""

import trio

from common.goflags import FlagError

METADATA_KEY = "pace"
MAX_PACE = 1_000_000_000
BURST_SECONDS = 0.1
TICK_SECONDS = 0.01


def parse_pace(text: str) -> int | None:
    """``POST /channel/pace``'s rate: messages a second, 0 to MAX_PACE (0: unpaced), or None for ``default``."""
    if text == "default":
        return None
    if not text.isascii() or not text.isdigit() or int(text) > MAX_PACE:
        raise ValueError(f"pace {text!r} is not an integer in [0, {MAX_PACE}]")
    return int(text)


def check_pace_flag(pace: int) -> None:
    if not 0 <= pace <= MAX_PACE:
        raise FlagError(f"--channel-pace must be in [0, {MAX_PACE}] messages a second, got {pace}")


class Pacer:
    """One paced channel's token bucket and the consumers waiting for its tokens."""

    def __init__(self, channel, pace: int):
        self.channel = channel
        self.pace = pace
        self.capacity = max(1.0, pace * BURST_SECONDS)
        self.quantum = min(self.capacity, max(1.0, pace * TICK_SECONDS))
        self.tokens = self.capacity
        self.delivered = 0
        self._filled_at = trio.current_time()
        self._waiting: dict = {}  # consumers that can take more, in arrival order (a dict as an ordered set)
        self._wanted = trio.Event()
        self._scope = trio.CancelScope()

    def client_ready(self, client) -> None:
        """``client`` can take more (Channel.client_ready, while paced): what the tokens allow now,
        and a place in the queue of waiting consumers if it can take still more."""
        tokens = self._fill()
        if tokens >= 1:
            sent = self.channel.deliver_queued(client, int(tokens))
            self.tokens -= sent
            self.delivered += sent
        if client.can_take_message():
            waiting = self._waiting
            waiting[client] = None
            if len(waiting) > len(self.channel.clients):  # some have left while none was dealt to
                clients = self.channel.clients
                self._waiting = {waiter: None for waiter in waiting if clients.get(waiter.id) is waiter}
            if self.tokens < 1 and self.channel.queue.has_messages():
                self._wanted.set()

    def queued(self) -> None:
        """Messages went into the channel's queue: deliver them if consumers wait."""
        if self._waiting:
            self._wanted.set()

    def _fill(self) -> float:
        now = trio.current_time()
        self.tokens = min(self.capacity, self.tokens + (now - self._filled_at) * self.pace)
        self._filled_at = now
        return self.tokens

    async def run(self) -> None:
        """Deal tokens to waiting consumers whenever both they and messages wait."""
        with self._scope:
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                while self._waiting and self.channel.queue.has_messages():
                    shortfall = self.quantum - self._fill()
                    if shortfall > 0:
                        await trio.sleep(shortfall / self.pace)
                    elif not self._deal():
                        break  # the queue could not be read (a failing disk): until the next wake

    def _deal(self) -> int:
        """One turn for each waiting consumer (it waits again at the end if it can take more);
        how many messages they got."""
        clients, before = self.channel.clients, self.delivered
        for client in list(self._waiting):
            if self.tokens < 1:
                break
            del self._waiting[client]
            if clients.get(client.id) is client:  # not one that has left meanwhile
                self.channel.client_ready(client)
        return self.delivered - before

    def stop(self) -> None:
        self._scope.cancel()


class Pacing:
    """Every channel's pace: --channel-pace, or the channel's own (``POST /channel/pace``)."""

    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.default_pace = nsqd.opts.channel_pace
        self.overrides: dict[tuple[str, str], int] = {}  # (topic, channel) -> its own pace (0: unpaced)

    def pace(self, channel) -> int:
        own = self.overrides.get((channel.topic.name, channel.name))
        return self.default_pace if own is None else own

    def apply(self, channel) -> None:
        """Give the channel the pacer its pace asks for (a new one: a changed pace starts with a full bucket)."""
        pace = self.pace(channel)
        if channel.pacer is None and not pace:
            return  # unpaced, as it was
        if channel.pacer is not None:
            channel.pacer.stop()
        pacer = Pacer(channel, pace) if pace else None
        if pacer is not None:
            self.nsqd.spawn(pacer.run)
        channel.set_pacer(pacer)

    def set(self, channel, pace: int | None) -> None:
        """The channel's own pace (None: --channel-pace's again)."""
        key = (channel.topic.name, channel.name)
        if pace is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = pace
        self.apply(channel)

    def load(self, channel, extras: dict) -> None:
        """The channel's pace as nsqd.dat keeps it."""
        if METADATA_KEY in extras:
            self.set(channel, min(extras[METADATA_KEY], MAX_PACE))

    def metadata(self, channel) -> dict:
        own = self.overrides.get((channel.topic.name, channel.name))
        return {} if own is None else {METADATA_KEY: own}

    def forget_channel(self, channel) -> None:
        """The channel was deleted: its pacer stops and its pace goes."""
        self.overrides.pop((channel.topic.name, channel.name), None)
        if channel.pacer is not None:
            channel.pacer.stop()

    def channel_stats(self, channel) -> dict:
        """/stats' ``pace`` (messages a second) while the channel is paced."""
        return {METADATA_KEY: channel.pacer.pace} if channel.pacer is not None else {}
