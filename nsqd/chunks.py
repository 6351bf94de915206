"""A long answer (``/stats``, ``/metrics``) kept as the chunks it was built in, never joined.

Built a step at a time on the event loop (nsqd/slices.py), such an answer was still joined
into one string at its end, encoded into bytes (a second copy) and joined to its head: with
10,000 topics x 2 channels each copy of a 3-12 MB answer is a step of milliseconds no slice
can split, and every client waited behind it. Here each step's pieces are joined (and
encoded) into a chunk of their own as the step ends, and the chunks go to the socket as they
are (serving/http.py writes a list of chunks with writev), so no step handles more than its
own part of the answer.
"""


TOPICS_A_CHUNK = 100  # an answer's topics a chunk: 10,000 topics, 100 chunks


class Chunks:
    """Pieces (text, or bytes with ``text=False``) gathered into encoded chunks, a chunk per ``cut()``."""

    def __init__(self, text: bool = True):
        self.text = text
        self.pending: list = []
        self.chunks: list[bytes] = []

    def add(self, piece) -> None:
        self.pending.append(piece)

    def extend(self, pieces) -> None:
        self.pending += pieces

    def cut(self) -> None:
        """What was added since the last cut becomes a chunk."""
        if self.pending:
            self.chunks.append("".join(self.pending).encode() if self.text else b"".join(self.pending))
            self.pending.clear()

    def topic_done(self, number: int) -> None:
        """Topic ``number`` (from 0) is added: a chunk ends after every TOPICS_A_CHUNK topics."""
        if number % TOPICS_A_CHUNK == TOPICS_A_CHUNK - 1:
            self.cut()

    def done(self) -> list[bytes]:
        """Every chunk, in order (the last cut made here)."""
        self.cut()
        return self.chunks
