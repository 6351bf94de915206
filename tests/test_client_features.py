"""nsqclient's negotiated features against a real nsqd, under asyncio and trio: TLS with a client
certificate nsqd verifies, snappy and deflate, AUTH, sample_rate and output buffering."""

import pytest

from nsqclient import AuthError, ConnectError, Consumer, Message, Producer
from nsqclient.connection import Connection

from .client_helpers import backend, run, start_nsqd, topic_stats, unique, wait_for  # noqa: F401 (fixtures)
from .feature_helpers import Certificates
from .test_nsqd_auth import EVERYTHING, AuthServer


async def round_trip(address: str, topic: str, bodies: list[bytes], **options) -> tuple[list[bytes], Connection]:
    """Publish ``bodies`` and consume them back, both sides with ``options``; the consumer's connection."""
    async with Producer(address, **options) as producer:
        await producer.multi_publish(topic, bodies)
    got = []

    async def handler(message: Message) -> None:
        got.append(message.body)

    async with Consumer(topic, "ch", handler, nsqd_tcp_addresses=[address], max_in_flight=50, **options) as consumer:
        await wait_for(lambda: len(got) == len(bodies))
        [conn] = consumer.connections.values()
        return got, conn


def client_stats(nsqd, topic: str) -> dict:
    return topic_stats(nsqd, topic)["channels"][0]["clients"][0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_nsqd(tmp_path_factory, certs):
    proc = start_nsqd(tmp_path_factory, f"--tls-cert={certs.cert_file}", f"--tls-key={certs.key_file}",
                      f"--tls-root-ca-file={certs.ca_file}", "--tls-client-auth-policy=require-verify",
                      "--tls-required=tcp-https", "--https-address=127.0.0.1:0")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client_cert_options(tmp_path_factory, certs) -> dict:
    directory = tmp_path_factory.mktemp("client")
    client = certs.ca.issue_cert("client.example")
    client.cert_chain_pems[0].write_to_path(directory / "client.pem")
    client.private_key_pem.write_to_path(directory / "client.key")
    return {"tls_v1": True, "tls_root_ca_file": certs.ca_file, "tls_cert": str(directory / "client.pem"),
            "tls_key": str(directory / "client.key")}


def test_tls_with_a_client_certificate_nsqd_verifies(backend, tls_nsqd, client_cert_options):
    topic = unique()

    async def body():
        return await round_trip(tls_nsqd.tcp_address, topic, [b"secret %d" % n for n in range(20)],
                                **client_cert_options)

    got, conn = run(backend, body)
    assert sorted(got) == sorted(b"secret %d" % n for n in range(20))
    assert conn.identify_answer["tls_v1"] is True


def test_tls_without_the_client_certificate_is_refused(backend, tls_nsqd, certs):
    async def body():
        async with Producer(tls_nsqd.tcp_address, tls_v1=True, tls_root_ca_file=certs.ca_file) as producer:
            with pytest.raises(ConnectError):
                await producer.publish(unique(), b"x")

    run(backend, body)


def test_tls_stats_show_the_connection(tls_nsqd, client_cert_options):
    topic = unique()

    async def body():
        async def handler(message: Message) -> None:
            pass

        async with Consumer(topic, "ch", handler, nsqd_tcp_addresses=[tls_nsqd.tcp_address], **client_cert_options):
            return client_stats(tls_nsqd, topic)

    stats = run("asyncio", body)
    assert stats["tls"] is True and stats["tls_version"].startswith("TLS1.")


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    proc = start_nsqd(tmp_path_factory)
    yield proc
    proc.stop()


@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_compressed_connections_carry_small_and_large_messages(backend, nsqd, compression):
    topic = unique()
    bodies = [b"%d " % n * (n + 1) for n in range(300)] + [bytes(range(256)) * 1200]

    async def body():
        return await round_trip(nsqd.tcp_address, topic, bodies, **{compression: True})

    got, conn = run(backend, body)
    assert sorted(got) == sorted(bodies)
    assert conn.identify_answer[compression] is True


def test_sample_rate_and_output_buffering_go_through_identify(backend, nsqd):
    topic = unique()

    async def body():
        async def handler(message: Message) -> None:
            pass

        options = {"sample_rate": 50, "output_buffer_size": 4096, "output_buffer_timeout": 0.05,
                   "msg_timeout": 30, "client_id": "sampler"}
        async with Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], **options) as consumer:
            [conn] = consumer.connections.values()
            return conn.identify_answer, client_stats(nsqd, topic)

    answer, stats = run(backend, body)
    assert (answer["sample_rate"], answer["output_buffer_size"], answer["output_buffer_timeout"],
            answer["msg_timeout"]) == (50, 4096, 50, 30000)
    assert (stats["sample_rate"], stats["client_id"]) == (50, "sampler")


@pytest.fixture(scope="module")
def auth_nsqd(tmp_path_factory):
    server = AuthServer()
    server.answers["good"] = (200, EVERYTHING, 0)
    proc = start_nsqd(tmp_path_factory, f"--auth-http-address={server.address}")
    yield proc
    proc.stop()
    server.close()


def test_auth_with_a_good_secret(backend, auth_nsqd):
    topic = unique()

    async def body():
        return await round_trip(auth_nsqd.tcp_address, topic, [b"allowed"], auth_secret="good")

    got, conn = run(backend, body)
    assert got == [b"allowed"]
    assert (conn.auth_answer["identity"], conn.auth_answer["permission_count"]) == ("alice", 1)


@pytest.mark.parametrize("secret, code", [("", "E_AUTH_FIRST"), ("wrong", "E_AUTH_FAILED")])
def test_auth_refused(backend, auth_nsqd, secret, code):
    async def body():
        async with Producer(auth_nsqd.tcp_address, auth_secret=secret) as producer:
            with pytest.raises(AuthError) as raised:
                await producer.publish(unique(), b"x")
            return raised.value.code

    assert run(backend, body) == code
