"""snappy and deflate (NSQ v1.3's nsqd/client_v2.go): the codecs alone, then negotiated with nsqd over real sockets."""

import json
import os
import zlib

import httpx
import pytest
import snappy
import trio

from common.commands import Identify, Mpub, Pub
from common.compression import (
    MAX_DECODED_PIECE, STREAM_IDENTIFIER, CompressionError, DeflateCodec, SnappyCodec,
)
from nsqd.stream_backend import CompressedStream

from .feature_helpers import certs, connect, read_frame_exactly  # noqa: F401 (certs is a fixture)
from .helpers import RawClient

PAYLOADS = [b"", b"x", os.urandom(1000), b"nsq " * 50_000, os.urandom(200_000)]


# -- the codecs ------------------------------------------------------------------------------

def decode_in_slices(codec, data: bytes, step: int) -> bytes:
    out = []
    for start in range(0, len(data), step):
        out.append(codec.decode(data[start:start + step]))
        while codec.backlog:
            out.append(codec.decode(b""))
    return b"".join(out)


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_snappy_round_trip_in_any_slicing(step):
    encoder, decoder = SnappyCodec(), SnappyCodec()
    stream = b"".join(encoder.encode(payload) for payload in PAYLOADS)
    assert stream.startswith(STREAM_IDENTIFIER) and stream.count(STREAM_IDENTIFIER) == 1
    assert decode_in_slices(decoder, stream, step) == b"".join(PAYLOADS)


def test_snappy_is_the_framed_format_python_snappy_and_go_speak():
    ours = SnappyCodec().encode(b"hello nsq")
    assert snappy.StreamDecompressor().decompress(ours) == b"hello nsq"
    compressor = snappy.StreamCompressor()
    theirs = compressor.add_chunk(b"one") + compressor.add_chunk(b"two")
    assert SnappyCodec().decode(theirs) == b"onetwo"
    # pynsq starts a new stream (identifier included) on every write
    restarted = b"".join(snappy.StreamCompressor().compress(b"%d" % i) for i in range(3))
    assert SnappyCodec().decode(restarted) == b"012"


@pytest.mark.parametrize("bad", [
    b"\x00\x08\x00\x00" + b"x" * 8,  # no stream identifier first
    STREAM_IDENTIFIER + b"\x00\x08\x00\x00" + b"\x00" * 8,  # bad checksum
    STREAM_IDENTIFIER + b"\x00\xff\xff\xff",  # a chunk longer than snappy allows
])
def test_snappy_refuses_corrupt_streams(bad):
    with pytest.raises(CompressionError):
        SnappyCodec().decode(bad)


@pytest.mark.parametrize("step", [1, 100, 1 << 20])
def test_deflate_round_trip_raw_and_sync_flushed(step):
    encoder, decoder = DeflateCodec(6), DeflateCodec(6)
    pieces = [encoder.encode(payload) for payload in PAYLOADS]
    assert all(piece.endswith(b"\x00\x00\xff\xff") for piece in pieces)  # each write decodable on arrival
    assert decode_in_slices(decoder, b"".join(pieces), step) == b"".join(PAYLOADS)
    assert zlib.decompressobj(-15).decompress(b"".join(pieces)) == b"".join(PAYLOADS)


def test_deflate_output_per_receive_is_bounded():
    bomb = DeflateCodec(9).encode(b"\x00" * (20 * MAX_DECODED_PIECE))
    decoder = DeflateCodec(6)
    first = decoder.decode(bomb)
    assert len(first) == MAX_DECODED_PIECE and decoder.backlog
    rest = 0
    while decoder.backlog:
        piece = decoder.decode(b"")
        assert len(piece) <= MAX_DECODED_PIECE
        rest += len(piece)
    assert len(first) + rest == 20 * MAX_DECODED_PIECE


def test_deflate_refuses_garbage():
    with pytest.raises(CompressionError):
        DeflateCodec(6).decode(b"\xff" * 64)


async def test_compressed_stream_decodes_what_came_before_the_switch():
    left, right = trio.testing.memory_stream_pair()
    sender = CompressedStream(left, SnappyCodec())
    early = SnappyCodec().encode(b"early")  # as if read along with the last plain frame
    receiver = CompressedStream(right, SnappyCodec(), received=early[:15])
    await left.send_all(early[15:])
    await sender.send_all(b"late")
    received = b""
    while len(received) < len(b"earlylate"):
        received += await receiver.receive_some()
    assert received == b"earlylate"
    await left.aclose()
    assert await receiver.receive_some() == b""


# -- negotiated with nsqd --------------------------------------------------------------------

@pytest.mark.parametrize("feature", ["snappy", "deflate"])
async def test_publish_and_consume_compressed(nsqd, feature):
    producer, answer = await connect(nsqd.tcp_port, **{feature: True})
    assert answer[feature] is True and isinstance(producer.stream, CompressedStream)
    big = os.urandom(300_000)
    await producer.send(Pub("z", b"small").to_bytes() + Mpub("z", [b"m1", big]).to_bytes())
    assert [await producer.read_response() for _ in range(2)] == [b"OK", b"OK"]
    consumer, _ = await connect(nsqd.tcp_port, **{feature: True})
    await consumer.sub("z", "c", rdy=10)
    bodies = [(await consumer.read_message()).body for _ in range(3)]
    assert bodies == [b"small", b"m1", big]
    stats = json.loads(await http_stats(nsqd))
    [client] = stats["topics"][0]["channels"][0]["clients"]
    assert (client["snappy"], client["deflate"]) == (feature == "snappy", feature == "deflate")


async def http_stats(nsqd) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json")).text


@pytest.mark.parametrize("requested, max_level, granted", [(0, 6, 6), (3, 6, 3), (9, 6, 6), (9, 9, 9), (-1, 2, 2)])
async def test_deflate_level_is_capped_by_max_deflate_level(start_nsqd, requested, max_level, granted):
    nsqd = await start_nsqd(max_deflate_level=max_level)
    client, answer = await connect(nsqd.tcp_port, deflate=True, deflate_level=requested)
    assert (answer["deflate_level"], answer["max_deflate_level"]) == (granted, max_level)
    assert client.stream.codec.level == granted
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_response() == b"OK"


async def test_snappy_and_deflate_together_are_refused(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Identify({"feature_negotiation": True, "snappy": True, "deflate": True}).to_bytes())
    assert await client.read_error() == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    await client.assert_closed()


@pytest.mark.parametrize("feature", ["snappy", "deflate"])
async def test_disabled_compression_is_declined(start_nsqd, feature):
    nsqd = await start_nsqd(**{feature: False})
    client, answer = await connect(nsqd.tcp_port, **{feature: True})
    assert answer[feature] is False and isinstance(client.stream, trio.SocketStream)
    await client.send(Pub("t", b"x").to_bytes())
    assert await client.read_response() == b"OK"


async def test_only_one_compression_may_be_enabled_even_if_the_other_is_off(start_nsqd):
    nsqd = await start_nsqd(snappy=False)
    _, answer = await connect(nsqd.tcp_port, snappy=True, deflate=True)
    assert (answer["snappy"], answer["deflate"]) == (False, True)


@pytest.mark.parametrize("feature", ["snappy", "deflate"])
async def test_tls_then_compression(start_nsqd, certs, feature):
    nsqd = await start_nsqd(**certs.nsqd_options())
    client, answer = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True, **{feature: True})
    assert answer["tls_v1"] is True and answer[feature] is True
    assert isinstance(client.stream.transport_stream, trio.SSLStream)
    await client.send(Pub("t", b"secret and small").to_bytes())
    assert await client.read_response() == b"OK"
    await client.sub("t", "c", rdy=1)
    assert (await client.read_message()).body == b"secret and small"


@pytest.mark.parametrize("name", ["snappy", "deflate"])
async def test_commands_sent_compressed_right_after_identify_are_read(nsqd, name):
    """A client that compresses before it has read IDENTIFY's answer: its bytes reach nsqd
    with the plain IDENTIFY and must go through the decoder all the same."""
    codec = SnappyCodec() if name == "snappy" else DeflateCodec(6)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Identify({"feature_negotiation": True, name: True}).to_bytes()
                      + codec.encode(Pub("early", b"x").to_bytes()))
    pending = bytearray()
    assert json.loads((await read_frame_exactly(client.stream, pending))[1])[name] is True
    stream = CompressedStream(client.stream, codec, bytes(pending))
    pending.clear()
    assert [await read_frame_exactly(stream, pending) for _ in range(2)] == [(0, b"OK"), (0, b"OK")]
    assert nsqd.topics["early"].message_count == 1


async def test_heartbeats_are_compressed_too(nsqd):
    client, _ = await connect(nsqd.tcp_port, snappy=True, heartbeat_interval=1000)
    with trio.fail_after(3):
        while True:
            data = await client.stream.receive_some()
            client.reader.receive_data(data)
            frame = client.reader.next_frame()
            if frame is not None:
                assert frame.data == b"_heartbeat_"
                break


@pytest.mark.parametrize("feature, garbage", [("snappy", b"\x00\x10\x00\x00" + b"\x01" * 16),
                                              ("deflate", b"\xff" * 64)])
async def test_corrupt_compressed_input_closes_that_connection_only(nsqd, feature, garbage):
    client, _ = await connect(nsqd.tcp_port, **{feature: True})
    await client.stream.transport_stream.send_all(garbage)
    await client.assert_closed()
    other, _ = await connect(nsqd.tcp_port, **{feature: True})
    await other.send(Pub("t", b"x").to_bytes())
    assert await other.read_response() == b"OK"
