"""A channel's screen: what it does with each message it is about to deliver (beyond NSQ).

The opt-in features that act on a delivery (message TTL, nsqd/message_ttl.py; dead-letter
topics, nsqd/dead_letter.py; the in-flight file of --persist-deferred with
--mem-queue-size=0, nsqd/deferred_store.py) each give a Part per channel: ``begin()``
returning a ``check(message)``, True when the feature took the message instead of its
delivery (and counted it), and optionally an ``end()``. A channel's ``screen`` is None unless some
part applies to it, so with every feature off Client.send_messages pays one attribute test
per batch and one test of a local per message. Otherwise ``screen.begin()`` is called once
per batch of deliveries (a check may read the clock then, not per message) and
``screen.end()`` after it (the in-flight file writes the batch's records then). nsqd
rebuilds a channel's screen whenever a setting that shapes it changes.
"""


from typing import Callable, NamedTuple


class Part(NamedTuple):
    begin: Callable
    end: Callable | None = None


class Screen:
    __slots__ = ("_factories", "_ends")

    def __init__(self, parts: list[Part]):
        self._factories = [part.begin for part in parts]
        self._ends = [part.end for part in parts if part.end is not None]

    def begin(self):
        """This batch's check."""
        checks = [factory() for factory in self._factories]
        combined = checks[0]
        for check in checks[1:]:
            combined = _either(combined, check)
        return combined

    def end(self) -> None:
        for end in self._ends:
            end()


def screen_for(nsqd, channel) -> Screen | None:
    """The parts that apply to ``channel``, in order (a message one part takes, the next
    never sees), or None."""
    parts = [part for part in (nsqd.message_ttl.check_for(channel), nsqd.dead_letters.check_for(channel),
                               nsqd.deferred_store.screen_part(channel)) if part is not None]
    return Screen(parts) if parts else None


def _either(first, second):
    return lambda message: first(message) or second(message)
