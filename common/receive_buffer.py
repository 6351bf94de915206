"""The receive side every sans-IO reader in common/ shares: bytes in, a read position."""


class ReceiveBuffer:
    """Bytes received from the peer and how far they have been parsed.

    Parsed bytes are dropped when the next data arrives, not as each event is taken out,
    so a receive that holds many small events costs one compaction, not one per event.
    """

    def __init__(self):
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet parsed."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes) -> None:
        if self._pos:
            self._drop_parsed()
        self._buf += data

    def _drop_parsed(self) -> None:
        del self._buf[: self._pos]
        self._pos = 0
