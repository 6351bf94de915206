import os
from pathlib import Path

import pytest

from nsqd.io_backend import CHOICES as IO_BACKENDS
from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .helpers import NsqdProcess

# The modules whose tests exercise client connections (protocol, delivery, heartbeats,
# timeouts, durability): each of their tests runs once with each nsqd I/O backend
# (nsqd/io_backend.py: "auto" is the epoll fast path on Linux, "portable" trio's streams).
# Every other test runs on "auto". A test about one backend's own mechanism says which with
# ``@pytest.mark.io_backends("auto")``. NSQD_IO_BACKEND=portable (or auto) runs every test on
# that one backend.
BOTH_IO_BACKENDS = {
    "test_nsqd_auth", "test_nsqd_compression", "test_nsqd_dead_letter", "test_nsqd_deferred_store",
    "test_nsqd_delivery", "test_nsqd_diskfull", "test_nsqd_durability", "test_nsqd_e2e_latency",
    "test_nsqd_errors", "test_nsqd_faults", "test_nsqd_identify", "test_nsqd_poller", "test_nsqd_publish",
    "test_nsqd_robustness", "test_nsqd_sampling", "test_nsqd_tls", "test_nsqd_topic_backlog",
    "test_pynsq_interop",
}
ONE_IO_BACKEND = os.environ.get("NSQD_IO_BACKEND", "")


def pytest_generate_tests(metafunc):
    if ONE_IO_BACKEND or metafunc.module.__name__.rpartition(".")[2] not in BOTH_IO_BACKENDS:
        return
    only = metafunc.definition.get_closest_marker("io_backends")
    metafunc.parametrize("io_backend", only.args if only else IO_BACKENDS, indirect=True)


@pytest.fixture(autouse=True)
def io_backend(request, monkeypatch) -> str:
    """The I/O backend of this test's nsqd, in-process (``start_nsqd``) or not (NsqdProcess)."""
    backend = getattr(request, "param", ONE_IO_BACKEND or IO_BACKENDS[0])
    monkeypatch.setattr(NsqdProcess, "io_backend", backend)
    return backend


@pytest.fixture
async def start_nsqd(nursery, tmp_path_factory, io_backend):
    """Start an in-process nsqd on ephemeral loopback ports, in a fresh data directory."""

    async def start(**overrides) -> NSQD:
        overrides.setdefault("data_path", str(tmp_path_factory.mktemp("nsqd")))
        overrides.setdefault("http_address", "127.0.0.1:0")
        overrides.setdefault("io_backend", io_backend)
        nsqd = NSQD(default_options(tcp_address="127.0.0.1:0", **overrides))
        await nursery.start(nsqd.run)
        return nsqd

    return start


@pytest.fixture
async def nsqd(start_nsqd) -> NSQD:
    return await start_nsqd()


@pytest.fixture
def nsqd_process(tmp_path):
    """A real nsqd process (for clients with their own event loop, such as pynsq)."""
    proc = NsqdProcess(f"--data-path={tmp_path}")
    yield proc
    proc.stop()


CHROMIUM = Path("/usr/lib/chromium/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps"]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"


def pytest_collection_modifyitems(items):
    """Browser tests run last: while Playwright's sync API is open it keeps an asyncio loop running
    in the main thread, which would break the asyncio-based clients (pynsq, Tornado) of other tests."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    """Captured output as text any transport can carry: a test that sends nsqd undecodable bytes
    gets them logged back as surrogates (common/errors.py keeps Go's bytes on the wire), which
    pytest-xdist's workers (`make test`) cannot send to the controller."""
    report.sections = [(title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
                       for title, text in report.sections]


@pytest.fixture(scope="session")
def chromium():
    """One headless Debian Chromium for the whole session, driven by Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def screenshot():
    """Save a full-page screenshot as a test artifact: artifacts/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def save(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save
