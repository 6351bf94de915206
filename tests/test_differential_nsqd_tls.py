"""TLS against NSQ's nsqd and ours, side by side (tests/differential_driver.py): IDENTIFY's tls_v1
(with and without compression on top), what /stats says of a TLS client, and --tls-required's
refusals over TCP and plain HTTP."""

import pytest

from .differential_driver import command, identify, mpub_body, nsqd_pair_fixture
from .differential_driver import pair  # noqa: F401 (a fixture the tests use)
from .feature_helpers import Certificates
from .go_nsq import requires_go

pytestmark = requires_go


@pytest.fixture(scope="module")
def tls_flags(tmp_path_factory) -> tuple[str, ...]:
    certificates = Certificates(tmp_path_factory.mktemp("certificates"))
    return (f"--tls-cert={certificates.cert_file}", f"--tls-key={certificates.key_file}",
            "--https-address=127.0.0.1:0")


@pytest.fixture(scope="module")
def required_tls_flags(tls_flags) -> tuple[str, ...]:
    return (*tls_flags, "--tls-required=true")


nsqd_pair = nsqd_pair_fixture(more_flags="tls_flags")
required_nsqd_pair = nsqd_pair_fixture(name="required_nsqd_pair", more_flags="required_tls_flags")


@pytest.fixture
def required(required_nsqd_pair):
    yield required_nsqd_pair
    required_nsqd_pair.end_test()


@pytest.mark.parametrize("settings", [
    {"tls_v1": True}, {"tls_v1": True, "snappy": True}, {"tls_v1": True, "deflate": True, "deflate_level": 2},
    {"tls_v1": False}, {"tls_v1": True, "output_buffer_size": -1}])
def test_identify_with_tls(pair, settings):
    pair.connect("c1")
    pair.send("c1", identify(feature_negotiation=True, output_buffer_timeout=25, **settings))
    pair.send("c1", command("SUB t_tls ch"))
    pair.send("c1", command("RDY 5"))
    pair.connect("p")
    pair.send("p", command("MPUB t_tls", mpub_body(b"one", b"two")))
    pair.send("c1", command("FIN <m0>"))
    pair.send("c1", command("FIN <m1>"))


def test_identify_with_tls_but_no_negotiation(pair):
    pair.connect("c1")
    pair.send("c1", identify(tls_v1=True))
    pair.send("c1", command("PUB t_tls", b"in the clear"))


@pytest.mark.parametrize("wire", [command("PUB t_required", b"x"), command("SUB t_required ch"), command("NOP"),
                                  command("AUTH", b"secret"), command("RDY 1"), command("BOGUS"),
                                  identify(feature_negotiation=True), identify(tls_v1=True)])
def test_tls_required_before_tls(required, wire):
    required.connect("c1")
    required.send("c1", wire)
    required.send("c1", command("PUB t_required", b"after"))


def test_tls_required_after_tls(required):
    required.connect("c1")
    required.send("c1", identify(feature_negotiation=True, tls_v1=True))
    required.send("c1", command("PUB t_required", b"x") + command("SUB t_required ch"))
    required.send("c1", command("RDY 1"))


@pytest.mark.parametrize("method,path", [("GET", "/ping"), ("GET", "/info"), ("GET", "/stats"), ("POST", "/pub?topic=x"),
                                         ("GET", "/nope"), ("PUT", "/ping"), ("GET", "/config/tls_required")])
def test_tls_required_over_plain_http(required, method, path):
    required.http(method, path, b"x" if method == "POST" else b"")
