"""The package as a user installs it: ``pip install .`` into a fresh virtualenv, with no extras, gives
the broker, nsqlookupd, nsqadmin (its stats history off, saying so and how to turn it on), the client
library and the utilities, and none of the history's packages (pyspark, pyarrow). Skipped, saying
why, where pip cannot reach a package index; pip's cache makes it quick where it can."""

import re
import shutil
import subprocess
import sys
import tomllib

import httpx
import pytest

from .admin_helpers import wait_for
from .helpers import ROOT, DaemonProcess

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
UTILITIES = ["to_nsq", "nsq_tail", "nsq_stat", "nsq_to_file", "nsq_to_http", "nsq_to_nsq"]
NOT_INSTALLED = "pyarrow, msgspec, pyspark are not installed: pip install '.[history]' (the history extra) turns it on"
HISTORY_OFF = f"WARNING: stats history off: {NOT_INSTALLED}"


def run(*command, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout)


def copy_source(destination) -> None:
    """What ``pip install .`` builds from, without the checkout's virtualenvs, caches and tests."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, destination / name)
    for package in {name.split(".")[0] for name in PYPROJECT["tool"]["setuptools"]["packages"]}:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtualenv with ``pip install .`` and nothing more."""
    base = tmp_path_factory.mktemp("bare-install")
    run(sys.executable, "-m", "venv", base / "venv").check_returncode()
    pip = base / "venv" / "bin" / "pip"
    probe = run(pip, "download", "--quiet", "--no-deps", "--dest", base / "probe", "trio", timeout=120)
    if probe.returncode:
        pytest.skip(f"no package index reachable: {(probe.stderr.strip().splitlines() or ['pip failed'])[-1]}")
    copy_source(base / "source")
    installed = run(pip, "install", "--quiet", base / "source")
    assert installed.returncode == 0, installed.stderr
    return base / "venv" / "bin"


def test_the_daemons_and_the_utilities_run(venv):
    for daemon in ("nsqd", "nsqlookupd"):
        version = run(venv / daemon, "--version", timeout=30)
        assert version.returncode == 0 and version.stdout.startswith(f"{daemon} v1.3.0 "), version
    for utility in UTILITIES:
        usage = run(venv / utility, "--help", timeout=30)
        assert usage.returncode == 0 and re.match(r"Usage of \w+:\n  -", usage.stderr), usage


def test_the_rollup_job_says_what_it_needs(venv):
    refused = run(venv / "nsqadmin-rollup", "--stats-dir=.", timeout=30)
    assert (refused.returncode, refused.stderr) == (1, f"nsqadmin-rollup: {NOT_INSTALLED}\n")


def test_the_client_library_imports_and_the_history_packages_are_absent(venv):
    found = run(venv / "python", "-c", "import nsqclient, importlib.util as u; "
                "print([m for m in ('pyspark', 'pyarrow', 'msgspec', 'py4j') if u.find_spec(m)])", timeout=30)
    assert (found.returncode, found.stdout) == (0, "[]\n"), found.stderr


def test_nsqadmin_runs_with_the_history_off(venv, tmp_path):
    admin = DaemonProcess("nsqadmin", ["--http-address=127.0.0.1:0", "--lookupd-http-address=127.0.0.1:1",
                                       f"--stats-dir={tmp_path / 'stats'}"], ("HTTP",), [str(venv / "nsqadmin")])
    try:
        wait_for(lambda: HISTORY_OFF in admin.log(), what="the history-off warning")
        base = f"http://127.0.0.1:{admin.ports['HTTP']}"
        health = httpx.get(f"{base}/api/health")
        assert health.status_code == 503 and health.json()["message"].startswith("HISTORY_OFF: ")
        # the web UI's templates and static files are installed with the package, not only in a checkout
        assert "nsqadmin.css" in httpx.get(f"{base}/topics").text
        assert httpx.get(f"{base}/static/nsqadmin.css").status_code == 200
    finally:
        assert admin.stop() == 0
