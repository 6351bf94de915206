"""A channel's screen: what it checks of a message before delivering it (beyond NSQ).

The opt-in features that can stop a delivery (message TTL, nsqd/message_ttl.py; dead-letter
topics, nsqd/dead_letter.py) each give a
check per channel. A channel's ``screen`` is None unless one of them applies to it, so with
every feature off Client.send_messages pays one attribute test per batch and one test of
a local per message. Otherwise ``screen()`` is called once per batch of deliveries (a check
may read the clock then, not per message) and returns ``check(header, body) -> True`` when
a feature took the message instead (and counted it). nsqd rebuilds a channel's screen
whenever a setting that shapes it changes.
"""


def screen_for(nsqd, channel):
    """The checks that apply to ``channel`` as one batch factory, or None."""
    factories = [factory for factory in (nsqd.message_ttl.check_for(channel), nsqd.dead_letters.check_for(channel))
                 if factory is not None]
    if not factories:
        return None
    if len(factories) == 1:
        return factories[0]

    def screen():
        checks = [factory() for factory in factories]
        combined = checks[0]
        for check in checks[1:]:
            combined = _either(combined, check)
        return combined

    return screen


def _either(first, second):
    return lambda header, body: first(header, body) or second(header, body)
