"""The seam between a connection's protocol side and its I/O, and what every backend shares.

Theory of operation (the shape of hypercorn's protocol/ and per-backend servers). A client
connection is one :class:`nsqd.connection.Connection`: it executes the commands, keeps the
flush policy, the heartbeats, the read deadline and the message timeouts, and owns every piece
of the connection's state. Moving bytes is its backend's, through the small interface below;
no rule of the protocol lives in a backend, and a backend knows nothing of the protocol but
``Connection.received``.

Two backends:

* the Linux fast path, :class:`nsqd.epoll_backend.EpollBackend`: a plain socket (no TLS, no
  codec) is read by nsqd's one poller task from an edge-triggered epoll, whose rounds hand
  every ready connection's bytes to it, one output batch per round (nsqd/output_batch.py), and
  output that must go is written straight to the socket (``os.write``) when the round ends;
* the portable one, :class:`nsqd.stream_backend.StreamBackend`: any trio stream, read by the
  connection's own task. It serves every connection that upgrades to TLS or compression (the
  connection moves to it), every connection where ``select.epoll`` does not exist (macOS,
  Windows: nothing imports the fast path there), every connection with ``--io-backend=portable``,
  and the tests' in-memory streams.

The clock is trio's (``now``): every timing rule of nsqd reads it, so trio.testing.MockClock
drives them all in the tests.
"""

from typing import Protocol

AUTO, PORTABLE = "auto", "portable"
CHOICES = (AUTO, PORTABLE)  # --io-backend

RECEIVE_SIZE = 64 * 1024  # bytes asked for per read
ENDED = "ended"  # what ``receive`` returns once the client has closed its side


class IOBackend(Protocol):
    """What the protocol side asks of a connection's I/O."""

    direct: bool  # ``send_now`` can write without blocking

    async def receive(self, connection):
        """Wait while the client's bytes come in, handing each read to ``connection.received``
        (or, in a poller's round, ``received_in_round``), until that returns something: what
        the connection must await then (a coroutine, or None), or ENDED once the client has
        closed. Raises a command's ClientError, or the OSError of a failed read."""

    def send_now(self, data: bytearray) -> int:
        """With ``direct``: write what the socket takes at once; how many bytes it took.
        Raises OSError when it took none (it would block, or the socket failed)."""

    async def send(self, data: bytearray) -> None:
        """Send all of ``data``, waiting while the socket is full."""

    async def aclose(self) -> None:
        """Close the connection's stream."""

    def now(self) -> float:
        """trio's clock."""

    async def start_tls(self, context, turns) -> "IOBackend":
        """The TLS handshake done: a portable backend over the TLS stream, whose reads take
        ``turns`` (nsqd/turns.py)."""

    def compress(self, codec, received: bytes) -> "IOBackend":
        """A portable backend through ``codec`` (``received``: bytes still to decode)."""
