"""An NSQ client library on anyio (runs under asyncio and trio), built on common/'s sans-IO
V2 protocol. Named ``nsqclient`` so it does not clash with pynsq's ``nsq``.

Public API:

* :class:`Producer` -- PUB / MPUB / DPUB to one nsqd over one pipelined connection.
* :class:`ProducerPool` -- publish to several nsqd, moving away from one that drains.
* :class:`Consumer` -- a topic/channel consumer: async handler, ``max_in_flight`` spread over
  every nsqd, discovery through nsqlookupd, go-nsq's RDY, backoff and reconnect rules.
* :class:`Message` -- ``body``, ``id``, ``attempts``, ``timestamp``; ``finish()``,
  ``requeue()``, ``touch()``.
* :class:`Config` -- go-nsq's options by go-nsq's names (``Config.set("max_in_flight", "200")``).
* :func:`publish` and :class:`BlockingProducer` -- publishing from synchronous code.
* Exceptions: :class:`NSQError` and its subclasses (see :mod:`nsqclient.errors`).
"""

from .blocking import BlockingProducer, publish
from .config import Config
from .consumer import Consumer, ConsumerStats
from .errors import (AuthError, ConfigError, ConnectError, ConnectionClosedError, NSQError, ProtocolError,
                     StoppedError)
from .message import Message
from .producer import Producer
from .producer_pool import ProducerPool

__all__ = ["AuthError", "BlockingProducer", "Config", "ConfigError", "ConnectError", "ConnectionClosedError",
           "Consumer", "ConsumerStats", "Message", "NSQError", "Producer", "ProducerPool", "ProtocolError",
           "StoppedError",
           "publish"]
