"""pynsq with tls_v1, snappy and deflate against a real nsqd process.

pynsq 0.9.1's compressed sockets say "no whole plaintext yet" with an OSError that has
no errno, which Tornado 6 takes for a broken connection (pynsq's compressed socket under Tornado's IOStream).
The ``compressed_socket_shim`` fixture re-raises it as the BlockingIOError Tornado
expects: a client-side fix, nsqd is not involved.
"""

import collections
import errno
import json
import urllib.request

import nsq
import pytest
from nsq.deflate_socket import DeflateSocket
from nsq.snappy_socket import SnappySocket

from .feature_helpers import Certificates
from .helpers import NsqdProcess
from .test_pynsq_interop import TornadoLoop, publish

# pynsq asks tornado for ssl.PROTOCOL_TLSv1_2, which Python deprecates
pytestmark = pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLSv1_2 is deprecated:DeprecationWarning")

FEATURES = {
    "tls": {"tls_v1": True},
    "snappy": {"snappy": True},
    "deflate": {"deflate": True, "deflate_level": 3},
    "tls+snappy": {"tls_v1": True, "snappy": True},
    "tls+deflate": {"tls_v1": True, "deflate": True},
}


@pytest.fixture
def compressed_socket_shim(monkeypatch):
    for socket_class in (SnappySocket, DeflateSocket):
        original = socket_class._recv

        def _recv(self, size, method, original=original):
            try:
                return original(self, size, method)
            except OSError as exc:
                if exc.args == (errno.EWOULDBLOCK,):
                    raise BlockingIOError(errno.EWOULDBLOCK, "no whole plaintext yet") from None
                raise

        monkeypatch.setattr(socket_class, "_recv", _recv)


@pytest.fixture
def tls_nsqd(tmp_path):
    certs = Certificates(tmp_path)
    proc = NsqdProcess(f"--data-path={tmp_path}", f"--tls-cert={certs.cert_file}", f"--tls-key={certs.key_file}",
                       "--https-address=127.0.0.1:0")
    proc.certs = certs
    yield proc
    proc.stop()


@pytest.fixture
def tornado_loop():
    loop = TornadoLoop()
    yield loop
    loop.close()


def http_port(proc: NsqdProcess) -> int:
    line = next(line for line in proc.log_lines if "HTTP: listening on" in line)
    return int(line.rsplit(":", 1)[1])


@pytest.mark.parametrize("feature", FEATURES)
def test_publish_and_consume(tornado_loop, tls_nsqd, compressed_socket_shim, feature):
    options = dict(FEATURES[feature])
    if options.get("tls_v1"):
        options["tls_options"] = {"ca_certs": tls_nsqd.certs.ca_file}
    writer = tornado_loop.keep(nsq.Writer([tls_nsqd.tcp_address], **options))
    tornado_loop.run_until(lambda: bool(writer.conns), timeout=5)
    bodies = [b"%s-%04d-" % (feature.encode(), i) + b"z" * (i % 300) for i in range(2000)]
    publish(tornado_loop, writer.pub, "features", bodies[0])
    for start in range(1, len(bodies), 500):
        publish(tornado_loop, writer.mpub, "features", bodies[start:start + 500])
    received = collections.Counter()

    def handler(message):
        received[message.body] += 1
        return True

    tornado_loop.keep(nsq.Reader(topic="features", channel="ch", nsqd_tcp_addresses=[tls_nsqd.tcp_address],
                                 message_handler=handler, max_in_flight=100, **options))
    tornado_loop.run_until(lambda: len(received) == len(bodies), timeout=30)
    assert set(received) == set(bodies) and max(received.values()) == 1

    with urllib.request.urlopen(f"http://127.0.0.1:{http_port(tls_nsqd)}/stats?format=json") as answer:
        stats = json.load(answer)
    [client] = stats["topics"][0]["channels"][0]["clients"]
    assert client["tls"] is ("tls" in feature)
    assert client["tls_version"] == ("TLS1.2" if "tls" in feature else "")  # pynsq asks for TLS 1.2
    assert (client["snappy"], client["deflate"]) == ("snappy" in feature, "deflate" in feature)
