"""nsqadmin with its stats history off: without the history extra's packages (pyarrow, msgspec,
pyspark), or without a Java runtime when it would run the rollup job itself. It starts, says why in
one warning line, and its pages and history routes say so instead of failing; it never starts a
rollup job that cannot run. (A fresh virtualenv with the bare package: test_package_install.py.)"""

import os
import sys
from types import SimpleNamespace

import httpx
import pytest

from nsqadmin.history import availability
from nsqadmin.nsqadmin import NSQAdmin
from nsqadmin.options import default_options

from .admin_helpers import AdminProcess, wait_for
from .helpers import NsqdProcess

# nsqadmin in an interpreter where the history extra's packages cannot be imported.
WITHOUT_HISTORY_PACKAGES = [sys.executable, "-c", "import sys; sys.modules.update(dict.fromkeys(('pyarrow', "
                            "'msgspec', 'pyspark'))); from nsqadmin.main import main; sys.exit(main())"]
NO_PACKAGES = ("pyarrow, msgspec, pyspark are not installed: pip install '.[history]' (the history extra) "
               "turns it on")
NO_JAVA_HOME = ("the rollup job needs a Java runtime (JAVA_HOME=/nonexistent/jre has no bin/java): install one "
                "(Debian: default-jre-headless) or set JAVA_HOME, or run the job elsewhere (--rollup-interval=0)")
NO_JAVA_ON_PATH = ("the rollup job needs a Java runtime (no java on PATH and JAVA_HOME is not set): install one "
                   "(Debian: default-jre-headless) or set JAVA_HOME, or run the job elsewhere (--rollup-interval=0)")


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory):
    """One nsqd with topic t and its channel c."""
    node = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", "--broadcast-address=127.0.0.1")
    try:
        for path in ("/topic/create?topic=t", "/channel/create?topic=t&channel=c"):
            httpx.post(f"http://127.0.0.1:{node.http_port}{path}").raise_for_status()
        yield node
    finally:
        status = node.stop()
    assert status == 0


def env_command(**changes: str | None) -> list[str]:
    """``python -m nsqadmin`` with the environment changed (None removes a variable)."""
    environ = {key: value for key, value in {**os.environ, **changes}.items() if value is not None}
    return ["env", "-i", *(f"{key}={value}" for key, value in environ.items()), sys.executable, "-m", "nsqadmin"]


CASES = {
    "no packages": (WITHOUT_HISTORY_PACKAGES, NO_PACKAGES),
    "JAVA_HOME without java": (env_command(JAVA_HOME="/nonexistent/jre"), NO_JAVA_HOME),
    "no java on PATH": (env_command(JAVA_HOME=None, PATH="/nonexistent"), NO_JAVA_ON_PATH),
}


@pytest.fixture(scope="module", params=list(CASES))
def admin(request, nsqd):
    """nsqadmin over the nsqd, asked to record and roll up every second, with the history off."""
    command, reason = CASES[request.param]
    running = AdminProcess(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", "--stats-interval=1s",
                           "--rollup-interval=1s", command=command)
    yield SimpleNamespace(process=running, reason=reason)
    assert running.stop() == 0
    assert f"WARNING: stats history off: {reason}\n" in running.log()


def test_one_warning_says_why_and_how_to_turn_it_on(admin):
    line = f"WARNING: stats history off: {admin.reason}\n"
    wait_for(lambda: line in admin.process.log(), what="the warning")
    assert admin.process.log().count("stats history off") == 1


@pytest.mark.parametrize("path", ["/", "/topics/t", "/topics/t/c", "/counter", "/nodes/127.0.0.1:{port}"])
def test_pages_say_the_history_is_off(admin, nsqd, path):
    page = httpx.get(admin.process.url + path.format(port=nsqd.http_port))
    assert page.status_code == 200
    if path != "/":  # the topics page shows no history section, only current rates where it has them
        assert f"The stats history is off: {admin.reason}." in page.text.replace("&#39;", "'")


@pytest.mark.parametrize("path", ["/api/rollups?topic=t", "/api/health"])
def test_history_routes_answer_503_history_off(admin, path):
    answer = httpx.get(admin.process.url + path)
    assert (answer.status_code, answer.json()) == (503, {"message": f"HISTORY_OFF: {admin.reason}"})


# -- what decides, without a process ------------------------------------------------------


def test_with_the_history_off_nothing_records_and_no_job_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jre")
    admin = NSQAdmin(default_options(nsqd_http_address=["127.0.0.1:4151"], stats_dir=str(tmp_path / "stats"),
                                     stats_interval=1.0, rollup_interval=1.0))
    assert (admin.history.off, admin.recorder, admin.scheduler) == (NO_JAVA_HOME, None, None)
    assert not (tmp_path / "stats").exists()


def options(rollup_interval: float = 60.0) -> SimpleNamespace:
    return SimpleNamespace(rollup_interval=rollup_interval)


@pytest.fixture
def java_home(tmp_path):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    return tmp_path


def test_java_is_found_as_spark_finds_it(java_home, tmp_path):
    assert availability.java_runtime({"JAVA_HOME": str(java_home), "PATH": "/nonexistent"}) == str(
        java_home / "bin" / "java")
    assert availability.java_runtime({"PATH": f"/nonexistent:{java_home / 'bin'}"}) == str(java_home / "bin" / "java")
    # JAVA_HOME set wins over PATH, as in bin/spark-class, even when it has no java
    assert availability.java_runtime({"JAVA_HOME": str(tmp_path / "none"), "PATH": str(java_home / "bin")}) is None
    assert availability.java_runtime({"PATH": "/nonexistent"}) is None


def test_without_java_only_running_the_rollups_turns_the_history_off(java_home):
    assert availability.off_reason(options(), {"PATH": str(java_home / "bin")}) is None
    assert availability.off_reason(options(), {"PATH": "/nonexistent"}) == NO_JAVA_ON_PATH
    assert availability.off_reason(options(), {"JAVA_HOME": "/nonexistent/jre"}) == NO_JAVA_HOME
    assert availability.off_reason(options(rollup_interval=0), {"PATH": "/nonexistent"}) is None
