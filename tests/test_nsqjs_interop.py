"""nsqjs (NSQ's Node.js client, tests/nsqjs/) against real nsqlookupd and nsqd processes:
a third client written by others, beside pynsq. It publishes with MPUB, PUB and DPUB, finds
the nsqd through nsqlookupd, consumes, requeues, and negotiates TLS, snappy and deflate."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .feature_helpers import Certificates
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess

NSQJS = Path(__file__).resolve().parent / "nsqjs"
COUNT = 500
DEFER_MS = 500

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NSQJS / "node_modules" / "nsqjs").exists(),
    reason="needs Node.js and tests/nsqjs/node_modules (make test installs them)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("nsqjs")
    certs = Certificates(data)
    lookupd = LookupdProcess()
    nsqd = NsqdProcess(f"--data-path={data}", f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                       "--broadcast-address=127.0.0.1", f"--tls-cert={certs.cert_file}",
                       f"--tls-key={certs.key_file}", "--https-address=127.0.0.1:0")
    yield lookupd, nsqd
    nsqd.stop()
    lookupd.stop()


@pytest.mark.parametrize("features", [{}, {"snappy": True}, {"deflate": True, "deflateLevel": 3}, {"tls": True},
                                      {"tls": True, "snappy": True}], ids=["plain", "snappy", "deflate", "tls",
                                                                           "tls+snappy"])
def test_nsqjs_publishes_discovers_consumes_and_requeues(cluster, features):
    lookupd, nsqd = cluster
    topic = "nsqjs_" + ("_".join(sorted(features)) or "plain")
    config = {"nsqd": nsqd.tcp_address, "lookupd": f"http://127.0.0.1:{lookupd.http_port}", "topic": topic,
              "count": COUNT, "features": features}
    run = subprocess.run(["node", str(NSQJS / "interop.js"), json.dumps(config)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["received"] == COUNT
    assert result["requeued_attempts"] == 2
    assert result["deferred_after_ms"] >= DEFER_MS - 50
    assert "Traceback" not in nsqd.log() and "unexpected error" not in nsqd.log()
