"""The stream compressions nsqd negotiates in IDENTIFY, sans-IO: bytes in, bytes out.

* snappy: golang/snappy's NewReader/NewWriter, i.e. the framed snappy stream format
  (a ``sNaPpY`` stream-identifier chunk, then chunks of ``[type][24-bit LE length]
  [masked CRC-32C][data]``). Encoding uses cramjam's framed compressor; decoding splits
  the input at chunk boundaries itself, because received slices cut chunks anywhere,
  and hands whole chunks to cramjam, which checks their CRCs.
* deflate: Go's compress/flate, raw DEFLATE without a zlib header, the writer
  sync-flushed after every write, so each write can be decoded on arrival.

A codec encodes what one side sends and decodes what it receives; a decoder error
(corrupt input) is a :class:`CompressionError`.
"""

import zlib

import cramjam

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_CHUNK_HEAD = 4
# golang/snappy's reader refuses longer chunks: a 64 KiB block's worst encoding plus its CRC.
MAX_CHUNK_LENGTH = 76490 + 4
# One received slice of a deflate bomb could otherwise inflate to a thousand times
# its size; the rest waits in the decoder until asked for.
MAX_DECODED_PIECE = 1024 * 1024


class CompressionError(ValueError):
    """The peer sent bytes that do not decode."""


class SnappyCodec:
    name = "snappy"

    def __init__(self):
        self._compressor = cramjam.snappy.Compressor()
        self._pending = b""
        self._started = False

    def encode(self, data) -> bytes:
        self._compressor.compress(bytes(data))  # cramjam takes bytes only, not the output bytearray
        return bytes(self._compressor.flush())

    @property
    def backlog(self) -> bool:
        """Whether decoded bytes wait without more input (never, for snappy)."""
        return False

    @property
    def ended(self) -> bool:
        return False

    def decode(self, data: bytes) -> bytes:
        if self._pending:
            data = self._pending + data
        end = _whole_chunks_end(data)
        self._pending = data[end:]
        if not end:
            return b""
        chunks = data[:end]
        if not self._started:
            if not chunks.startswith(STREAM_IDENTIFIER):
                raise CompressionError("snappy stream does not start with the stream identifier")
            self._started = True
        else:
            chunks = STREAM_IDENTIFIER + chunks  # cramjam decodes whole streams only
        try:
            return bytes(cramjam.snappy.decompress(chunks))
        except cramjam.DecompressionError as exc:
            raise CompressionError(f"snappy: {exc}") from None


def _whole_chunks_end(data: bytes) -> int:
    """Where the last complete chunk of ``data`` ends."""
    pos, size = 0, len(data)
    while size - pos >= _CHUNK_HEAD:
        length = int.from_bytes(data[pos + 1 : pos + 4], "little")
        if length > MAX_CHUNK_LENGTH:
            raise CompressionError(f"snappy chunk of {length} bytes is too long")
        end = pos + _CHUNK_HEAD + length
        if end > size:
            break
        pos = end
    return pos


class DeflateCodec:
    name = "deflate"

    def __init__(self, level: int):
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def encode(self, data) -> bytes:
        compressor = self._compressor
        return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)

    @property
    def backlog(self) -> bool:
        return bool(self._decompressor.unconsumed_tail)

    @property
    def ended(self) -> bool:
        """The peer closed its deflate stream (a final block): nothing more will come."""
        return self._decompressor.eof

    def decode(self, data: bytes) -> bytes:
        decompressor = self._decompressor
        if decompressor.unconsumed_tail:
            data = decompressor.unconsumed_tail + data
        try:
            return decompressor.decompress(data, MAX_DECODED_PIECE)
        except zlib.error as exc:
            raise CompressionError(f"deflate: {exc}") from None
