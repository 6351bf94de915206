from .helpers import RawClient


async def test_pub_sub_fin_round_trip(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"PUB t\n\x00\x00\x00\x05hello")
    assert await client.read_response() == b"OK"
    await client.sub("t", "c", rdy=1)
    msg = await client.read_message()
    assert (msg.body, msg.attempts) == (b"hello", 1)
    await client.send(b"FIN " + msg.id + b"\n")
    await client.send(b"FIN " + msg.id + b"\n")
    assert await client.read_error() == b"E_FIN_FAILED FIN " + msg.id + b" failed ID not in flight"
