"""nsqadmin's stats history flags (issue 10): --stats-dir, --stats-interval, --stats-retention,
--rollup-interval, --spark-master; their defaults, config-file keys, refusals, and a --stats-dir
nsqadmin cannot write as a start-up error."""

import subprocess
import sys

import httpx
import pytest

from common.goflags import FlagError
from nsqadmin.options import load_options

from .admin_helpers import AdminProcess, closed_port_address
from .helpers import ROOT

NSQD = "--nsqd-http-address=127.0.0.1:4151"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqadmin", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)


def test_defaults():
    opts = load_options([NSQD])
    assert (opts.stats_dir, opts.stats_interval, opts.stats_retention, opts.rollup_interval, opts.spark_master) == \
        ("./nsqadmin-data/stats", 10.0, 168 * 3600.0, 300.0, "local[*]")


@pytest.mark.parametrize("master", ["local", "local[1]", "local[16]", "local[*]", "spark://127.0.0.1:7077",
                                    "spark://spark-master.example:7077", "spark://[::1]:7077"])
def test_spark_masters_accepted(master):
    assert load_options([NSQD, f"--spark-master={master}"]).spark_master == master


@pytest.mark.parametrize("args, message", [
    (["--stats-interval=-10s"], "--stats-interval (-10s) must not be negative"),
    (["--stats-retention=-1h"], "--stats-retention (-1h0m0s) must be positive"),
    (["--stats-retention=0"], "--stats-retention (0s) must be positive"),
    (["--rollup-interval=-1m"], "--rollup-interval (-1m0s) must not be negative"),
    (["--stats-interval=often"], 'invalid value "often" for flag -stats-interval: parse error'),
    (["--stats-dir="], "--stats-dir must not be empty while recording or rollups are on"),
    (["--spark-master=yarn"], "invalid --spark-master 'yarn': use local, local[N], local[*] or spark://HOST:PORT"),
    (["--spark-master=local[0]"], "invalid --spark-master 'local[0]'"),
    (["--spark-master=local[two]"], "invalid --spark-master 'local[two]'"),
    (["--spark-master=spark://host"], "invalid --spark-master 'spark://host'"),
    (["--spark-master=spark://host:70000"], "invalid --spark-master 'spark://host:70000'"),
    (["--spark-master=mesos://host:5050"], "invalid --spark-master 'mesos://host:5050'"),
])
def test_bad_history_flags_are_refused_with_a_clear_message(args, message):
    with pytest.raises(FlagError) as caught:
        load_options([NSQD, *args])
    assert message in str(caught.value)


def test_an_empty_stats_dir_is_fine_with_history_off():
    assert load_options([NSQD, "--stats-dir=", "--stats-interval=0", "--rollup-interval=0"]).stats_dir == ""


def test_the_command_exits_1_on_a_bad_history_flag():
    done = run(NSQD, "--spark-master=yarn")
    assert done.returncode == 1
    assert done.stderr.strip() == ("nsqadmin: invalid --spark-master 'yarn': use local, local[N], local[*] "
                                   "or spark://HOST:PORT")


def test_usage_documents_the_history_flags():
    usage = run("--help").stderr
    for flag in ("-stats-dir string", "-stats-interval duration", "-stats-retention duration",
                 "-rollup-interval duration", "-spark-master string", "0 turns recording off",
                 "0 = no worker, no scheduled rollups"):
        assert flag in usage, flag


def test_a_stats_dir_that_cannot_be_written_stops_the_start(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run(f"--nsqd-http-address={closed_port_address()}", "--http-address=127.0.0.1:0",
               f"--stats-dir={blocker / 'stats'}", "--rollup-interval=0")
    assert done.returncode == 1
    assert done.stderr.strip().endswith(f"FATAL: --stats-dir: cannot write to {blocker / 'stats'} - not a directory")
    assert "Traceback" not in done.stderr


def test_a_bad_stats_dir_does_not_matter_with_history_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    admin = AdminProcess(f"--nsqd-http-address={closed_port_address()}", f"--stats-dir={blocker / 'stats'}",
                         "--stats-interval=0", "--rollup-interval=0")
    assert admin.stop() == 0


def test_config_file_keys(tmp_path):
    config = tmp_path / "nsqadmin.cfg"
    config.write_text(f'stats_dir = "{tmp_path / "history"}"\nstats_interval = "250ms"\nstats_retention = "24h"\n'
                      'rollup_interval = "0s"\nspark_master = "local[2]"\n')
    opts = load_options([NSQD, f"--config={config}"])
    assert (opts.stats_dir, opts.stats_interval, opts.stats_retention, opts.rollup_interval, opts.spark_master) == \
        (str(tmp_path / "history"), 0.25, 24 * 3600.0, 0.0, "local[2]")
    admin = AdminProcess(f"--nsqd-http-address={closed_port_address()}", f"--config={config}")
    try:
        get = lambda opt: httpx.get(f"{admin.url}/config/{opt}")  # noqa: E731
        assert [get(opt).json() for opt in ("stats_interval", "stats_retention", "rollup_interval")] == \
            [250_000_000, 24 * 3600 * 10**9, 0]
        assert get("spark_master").text == "local[2]"
    finally:
        assert admin.stop() == 0
    assert "unknown" not in admin.log()
