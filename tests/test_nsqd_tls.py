"""TLS in nsqd (NSQ v1.3's nsqd/protocol_v2.go, nsqd/client_v2.go, nsqd/http.go): the in-band upgrade after IDENTIFY,
--tls-required on TCP and HTTP, the HTTPS listener, client certificates, startup errors."""

import json
import ssl
import subprocess
import sys

import httpx
import pytest
import trio
import trustme

from common.commands import Identify, Nop
from common.errors import ClientError
from common.protocol_v2 import CommandParser
from nsqd.options import load_options

from .feature_helpers import Certificates, certs, connect  # noqa: F401 (certs is a fixture)
from .helpers import ROOT, RawClient

PUB = b"PUB t\n\x00\x00\x00\x05hello"


async def tls_nsqd(start_nsqd, certs: Certificates, **options):
    return await start_nsqd(**certs.nsqd_options(**options))


async def test_identify_tls_v1_upgrades_and_every_command_goes_through_tls(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    client, answer = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True)
    assert (answer["tls_v1"], answer["snappy"], answer["deflate"]) == (True, False, False)
    assert isinstance(client.stream, trio.SSLStream)
    await client.send(PUB)
    assert await client.read_response() == b"OK"
    await client.sub("t", "c", rdy=1)
    message = await client.read_message()
    assert message.body == b"hello"
    await client.send(b"FIN " + message.id + b"\n")


async def test_stats_show_the_tls_connection(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    client, _ = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True)
    await client.sub("t", "c")
    [channel] = nsqd.topics["t"].channels.values()
    stats = json.loads((await http_get(nsqd.http_port, "/stats?format=json")).text)
    [client_stats] = stats["topics"][0]["channels"][0]["clients"]
    tls_object = client.stream
    assert client_stats["tls"] is True
    assert client_stats["tls_version"] == {"TLSv1.3": "TLS1.3", "TLSv1.2": "TLS1.2"}[tls_object.version()]
    assert client_stats["tls_cipher_suite"].startswith("TLS_")
    assert client_stats["tls_negotiated_protocol"] == ""
    assert client_stats["tls_negotiated_protocol_is_mutual"] is True
    assert channel.clients


async def test_tls_v1_without_a_certificate_is_declined_and_the_connection_stays_plain(nsqd):
    client, answer = await connect(nsqd.tcp_port, tls_v1=True)
    assert answer["tls_v1"] is False
    await client.send(PUB)
    assert await client.read_response() == b"OK"


async def test_without_feature_negotiation_tls_v1_is_ignored(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(tls_v1=True) == b"OK"
    await client.send(PUB)
    assert await client.read_response() == b"OK"


async def test_bytes_sent_in_the_clear_before_the_handshake_are_dropped(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    client = await RawClient.connect(nsqd.tcp_port)
    # the PUB rides along with IDENTIFY, before TLS: it must not count as the TLS peer's
    await client.send(Identify({"feature_negotiation": True, "tls_v1": True}).to_bytes() + b"PUB injected\n"
                      + b"\x00\x00\x00\x01x")
    client.stream = trio.SSLStream(client.stream, certs.client_context(), server_hostname="127.0.0.1")
    answer = await read_plain_answer_then_handshake(client)
    assert answer["tls_v1"] is True
    await client.send(PUB)
    assert await client.read_response() == b"OK"
    assert "injected" not in nsqd.topics


async def read_plain_answer_then_handshake(client: RawClient) -> dict:
    """IDENTIFY's answer came in the clear: read it off the TLS stream's transport first."""
    transport = client.stream.transport_stream
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        data += await transport.receive_some(65536)
    await client.stream.do_handshake()
    assert await client.read_response() == b"OK"
    return json.loads(data[8:])


async def test_a_failed_handshake_closes_only_that_connection(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(Identify({"feature_negotiation": True, "tls_v1": True}).to_bytes())
    assert json.loads(await client.read_response())["tls_v1"] is True
    await client.send(b"this is not a TLS ClientHello\r\n" * 20)
    await client.assert_closed()
    other, _ = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True)
    await other.send(PUB)
    assert await other.read_response() == b"OK"


async def test_tls_min_version_refuses_older_clients(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_min_version="tls1.3")
    old_client = certs.client_context()
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(trio.BrokenResourceError):
        await connect(nsqd.tcp_port, old_client, tls_v1=True)
    _, answer = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True)
    assert answer["tls_v1"] is True


# -- --tls-required on TCP ---------------------------------------------------------------

def test_parser_knows_only_identify_until_tls_is_established():
    parser = CommandParser(tls_required=True, expect_magic=False)
    parser.receive_data(b"PUB t\n\x7f\xff\xff\xff")  # refused before its (huge) body is awaited
    with pytest.raises(ClientError, match=r"^E_INVALID cannot PUB in current state \(TLS required\)$"):
        parser.next_event()
    parser = CommandParser(tls_required=True, expect_magic=False)
    parser.receive_data(b"IDENTIFY\n\x00\x00\x00\x02{}NOP\n")
    assert isinstance(parser.next_event(), Identify)
    assert parser.take_buffered() == b"NOP\n"
    parser.tls_established()
    parser.receive_data(b"NOP\n")
    assert parser.next_event() == Nop()



@pytest.mark.parametrize("command, name", [
    (PUB, "PUB"), (b"SUB t c\n", "SUB"), (b"NOP\n", "NOP"), (b"AUTH\n\x00\x00\x00\x01s", "AUTH"),
    (b"MPUB t\n\x00\x00\x00\x04\x00\x00\x00\x00", "MPUB"), (b"BOGUS\n", "BOGUS"), (b"RDY 1\n", "RDY"),
])
async def test_tls_required_refuses_every_command_but_identify_before_tls(start_nsqd, certs, command, name):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="true")
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(command)
    assert await client.read_error() == f"E_INVALID cannot {name} in current state (TLS required)".encode()
    await client.assert_closed()
    assert "t" not in nsqd.topics


async def test_tls_required_after_a_plain_identify_still_refuses(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="tcp-https")
    client, answer = await connect(nsqd.tcp_port)
    assert answer["tls_v1"] is False
    await client.send(b"SUB t c\n")
    assert await client.read_error() == b"E_INVALID cannot SUB in current state (TLS required)"
    await client.assert_closed()


async def test_tls_required_is_met_by_the_upgrade(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="true")
    client, _ = await connect(nsqd.tcp_port, certs.client_context(), tls_v1=True)
    await client.send(PUB)
    assert await client.read_response() == b"OK"


# -- HTTP and HTTPS ------------------------------------------------------------------------

async def http_get(port: int, path: str, scheme: str = "http", verify=True) -> httpx.Response:
    async with httpx.AsyncClient(verify=verify) as http:
        return await http.get(f"{scheme}://127.0.0.1:{port}{path}")


async def test_https_serves_the_same_api(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs)
    async with httpx.AsyncClient(verify=certs.client_context()) as http:
        base = f"https://127.0.0.1:{nsqd.https_port}"
        assert (await http.get(f"{base}/ping")).text == "OK"
        response = await http.post(f"{base}/pub?topic=secure", content=b"over https")
        assert (response.status_code, response.text) == (200, "OK")
        info = (await http.get(f"{base}/info")).json()
        assert info["tcp_port"] == nsqd.tcp_port
    assert nsqd.topics["secure"].message_count == 1
    assert (await http_get(nsqd.http_port, "/ping")).text == "OK"  # plain HTTP too, TLS not required


async def test_https_listener_needs_a_certificate(start_nsqd):
    nsqd = await start_nsqd(https_address="127.0.0.1:0")
    assert nsqd.https_port == 0


async def test_tls_required_true_refuses_plain_http_with_the_https_port(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="true")
    for path in ("/ping", "/stats", "/nowhere"):
        response = await http_get(nsqd.http_port, path)
        assert response.status_code == 403
        assert response.text == f'{{"message": "TLS_REQUIRED", "https_port": {nsqd.https_port}}}'
        assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    response = await http_get(nsqd.https_port, "/ping", "https", certs.client_context())
    assert response.text == "OK"


async def test_tls_required_tcp_https_keeps_plain_http(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="tcp-https")
    assert (await http_get(nsqd.http_port, "/ping")).text == "OK"


async def test_config_reports_tls_options_as_nsqd_holds_them(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_required="tcp-https", tls_min_version="tls1.2")
    assert (await http_get(nsqd.http_port, "/config/tls_required")).json() == 1
    assert (await http_get(nsqd.http_port, "/config/tls_min_version")).json() == 0x0303
    assert (await http_get(nsqd.http_port, "/info")).json()["max_deflate_level"] == 6


# -- client certificates ---------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["require", "require-verify"])
async def test_client_auth_policy_requires_a_certificate_and_forces_tls(start_nsqd, certs, policy):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_client_auth_policy=policy, tls_root_ca_file=certs.ca_file)
    assert nsqd.opts.tls_required == 2
    plain = await RawClient.connect(nsqd.tcp_port)
    await plain.send(PUB)
    assert await plain.read_error() == b"E_INVALID cannot PUB in current state (TLS required)"

    with_cert = certs.client_context(certs.ca.issue_cert("client-one"))
    client, _ = await connect(nsqd.tcp_port, with_cert, tls_v1=True)
    await client.send(PUB)
    assert await client.read_response() == b"OK"

    await assert_refused(nsqd.tcp_port, certs.client_context())


async def assert_refused(port: int, context: ssl.SSLContext) -> None:
    """The handshake fails, or (TLS 1.3, where the client's certificate is checked after
    the client has finished) the connection breaks right after it."""
    with pytest.raises((trio.BrokenResourceError, EOFError)):
        client, _ = await connect(port, context, tls_v1=True)
        await client.send(PUB)
        await client.read_response()


async def test_require_verify_refuses_a_certificate_of_another_ca(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_client_auth_policy="require-verify",
                          tls_root_ca_file=certs.ca_file)
    await assert_refused(nsqd.tcp_port, certs.client_context(trustme.CA().issue_cert("stranger")))


async def test_https_with_require_verify_asks_for_the_client_certificate(start_nsqd, certs):
    nsqd = await tls_nsqd(start_nsqd, certs, tls_client_auth_policy="require-verify",
                          tls_root_ca_file=certs.ca_file)
    context = certs.client_context(certs.ca.issue_cert("client-one"))
    assert (await http_get(nsqd.https_port, "/ping", "https", context)).text == "OK"
    with pytest.raises(httpx.HTTPError):
        await http_get(nsqd.https_port, "/ping", "https", certs.client_context())


# -- startup errors (nsqd.New) ----------------------------------------------------------------

def run_nsqd(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqd", "--tcp-address=127.0.0.1:0", "--http-address=",
                           f"--data-path={tmp_path}", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args, reason", [
    (["--tls-required"], "cannot require TLS client connections without TLS key and cert"),
    (["--tls-required=tcp-https"], "cannot require TLS client connections without TLS key and cert"),
    (["--tls-client-auth-policy=require"], "cannot require TLS client connections without TLS key and cert"),
    (["--max-deflate-level=0"], "--max-deflate-level must be [1,9]"),
    (["--max-deflate-level=10"], "--max-deflate-level must be [1,9]"),
    (["--tls-min-version=ssl3.0"], "unknown tlsVersionOption"),
    (["--tls-required=maybe"], "for -tls-required: strconv.ParseBool"),
    (["--auth-http-request-method=put"], "--auth-http-request-method must be get or post"),
    (["--tls-cert=/nonexistent/cert.pem", "--tls-key=/nonexistent/key.pem"], "No such file"),
])
def test_startup_errors_exit_1(tmp_path, args, reason):
    result = run_nsqd(tmp_path, *args)
    assert result.returncode == 1, result.stderr
    assert reason in result.stderr


def test_tls_options_from_the_config_file(tmp_path, certs):
    config = tmp_path / "nsqd.cfg"
    config.write_text(f'tls_required = true\ntls_min_version = "TLS1.2"\ntls_cert = "{certs.cert_file}"\n'
                      f'tls_key = "{certs.key_file}"\nauth_http_addresses = ["127.0.0.1:1"]\n')
    opts = load_options([f"--config={config}"])
    assert (opts.tls_required, opts.tls_min_version, opts.auth_http_address) == (2, 0x0303, ["127.0.0.1:1"])
    assert load_options(["--tls-required", "--tls-cert=c", "--tls-key=k"]).tls_required == 2
    assert load_options(["--tls-required=false"]).tls_required == 0
