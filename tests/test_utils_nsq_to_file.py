"""nsq_to_file end to end: the console script archiving topics of real nsqd (given, or found
through nsqlookupd) into files named, rotated, gzipped and moved as NSQ's are."""

import gzip
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import (Utility, assert_all_fatal, assert_fatal, assert_go_usage, channel_stats, publish,
                            run_script, run_scripts, wait_until)

USAGE = """\
  -channel string
    \tnsq channel (default "nsq_to_file")
  -consumer-opt value
    \toption to passthrough to nsq.Consumer (may be given multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)
  -datetime-format string
    \tstrftime compatible format for <DATETIME> in filename format (default "%Y-%m-%d_%H")
  -filename-format string
    \toutput filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is increased when file already exists) (default "<TOPIC>.<HOST><REV>.<DATETIME>.log")
  -gzip
    \tgzip output files.
  -gzip-level int
    \tgzip compression level (1-9, 1=BestSpeed, 9=BestCompression) (default 6)
  -host-identifier string
    \tvalue to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are valid replacement tokens
  -http-client-connect-timeout duration
    \ttimeout for HTTP connect (default 2s)
  -http-client-request-timeout duration
    \ttimeout for HTTP request (default 5s)
  -log-level string
    \tset log verbosity: debug, info, warn, error, or fatal (default "info")
  -log-prefix string
    \tlog message prefix (default "[nsq_to_file] ")
  -lookupd-http-address value
    \tlookupd HTTP address (may be given multiple times)
  -max-in-flight int
    \tmax number of messages to allow in flight (default 200)
  -nsqd-tcp-address value
    \tnsqd TCP address (may be given multiple times)
  -output-dir string
    \tdirectory to write output files to (default "/tmp")
  -rotate-interval duration
    \trotate the file every duration
  -rotate-size rotate-size
    \trotate the file when it grows bigger than rotate-size bytes
  -skip-empty-files
    \tskip writing empty files
  -sync-interval duration
    \tsync file to disk every duration (default 30s)
  -topic value
    \tnsq topic (may be given multiple times)
  -topic-pattern string
    \tonly log topics matching the following pattern
  -topic-refresh duration
    \thow frequently the topic list should be refreshed (default 1m0s)
  -version
    \tprint version string
  -work-dir string
    \tdirectory for in-progress files before moving to output-dir
"""
SHORT_HOST = socket.gethostname().split(".")[0]


@pytest.fixture(scope="module")
def lookupd():
    proc = LookupdProcess()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def nsqd(tmp_path_factory, lookupd):
    proc = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('nsqd')}", "--broadcast-address=127.0.0.1",
                       f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
    yield proc
    proc.stop()


def hours() -> set[str]:
    """The <DATETIME> of now and of a minute on (a test may straddle the hour)."""
    return {time.strftime("%Y-%m-%d_%H", time.localtime(time.time() + delta)) for delta in (0, 60)}


def files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


def test_help_version_and_bad_flags():
    runs = run_scripts("nsq_to_file",
                       ["-h"], ["--version"], ["--rotate-size", "1MB"], ["--topic=t", "extra", "args"],
                       ["--log-level=loud"])
    assert_go_usage(runs[0], "nsqd", USAGE)
    version = runs[1]
    assert (version.returncode, version.stdout) == (0, "nsq_to_file v1.3.0\n")
    bad = runs[2]
    assert bad.returncode == 2
    assert bad.stderr.startswith('invalid value "1MB" for flag -rotate-size: parse error\nUsage of nsqd:\n')
    assert_fatal(runs[3], "unknown arguments: [extra args]")
    assert_fatal(runs[4], "--log-level is invalid")


def test_fatal_checks(tmp_path):
    address = "--nsqd-tcp-address=127.0.0.1:1"
    assert_all_fatal("nsq_to_file", [
        (["--channel=", address], "--channel is required"),
        (["--topic=t"], "--nsqd-tcp-address or --lookupd-http-address required."),
        ([address, "--gzip-level=10"], "invalid --gzip-level value (10), should be 1-9"),
        ([address], "--topic or --topic-pattern required"),
        ([address, "--topic-pattern=.*"], "--lookupd-http-address must be specified when no --topic specified"),
        ([address, "--topic=t", "--gzip", "--filename-format=<TOPIC>.log"],
         "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"),
        ([address, "--topic=t", f"--output-dir={tmp_path}"], "failed to connect to nsqd at 127.0.0.1:1"),
    ])


def test_archives_a_topic_line_by_line_and_finishes_on_sigterm(nsqd, tmp_path):
    publish(nsqd.http_port, "archive", b"first", b"second", b"third")
    utility = Utility("nsq_to_file", "-topic", "archive", "-nsqd-tcp-address", nsqd.tcp_address,
                      "-output-dir", str(tmp_path), "-sync-interval", "200ms")
    try:
        wait_until(lambda: files(tmp_path) and files(tmp_path)[0].read_bytes() == b"first\nsecond\nthird\n",
                   what="3 lines in the file")
        wait_until(lambda: channel_stats(nsqd.http_port, "archive", "nsq_to_file")["in_flight_count"] == 0,
                   what="the 3 messages finished once on disk")
        publish(nsqd.http_port, "archive", b"fourth")
        wait_until(lambda: files(tmp_path)[0].read_bytes().endswith(b"fourth\n"), what="the 4th line")
        assert utility.stop(signal.SIGTERM) == 0
    finally:
        utility.kill()
    [archived] = files(tmp_path)
    assert archived.name in {f"archive.{SHORT_HOST}.{hour}.log" for hour in hours()}
    assert archived.read_bytes() == b"first\nsecond\nthird\nfourth\n"
    stats = channel_stats(nsqd.http_port, "archive", "nsq_to_file")
    assert (stats["depth"], stats["in_flight_count"], stats["message_count"]) == (0, 0, 4)
    log = "".join(utility.stderr)
    assert re.search(r"^\[nsq_to_file\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: \[archive/nsq_to_file\] opening "
                     + re.escape(str(archived)) + "$", log, re.MULTILINE), log


def test_gzip_rotation_by_size_and_work_dir(nsqd, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    publish(nsqd.http_port, "rotating", b"aaaaa", b"bbbbb", b"ccccc", b"ddddd")
    utility = Utility("nsq_to_file", "--topic=rotating", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--output-dir={out}", f"--work-dir={work}", "--gzip", "--gzip-level=9", "--rotate-size=10",
                      "--filename-format=<TOPIC>/<HOST><REV>.<PID>.log", "--host-identifier=h-<SHORT_HOST>",
                      "--max-in-flight=4")
    try:
        wait_until(lambda: len(files(out)) == 1, what="the first file to move to the output dir")
        assert utility.stop(signal.SIGINT) == 0
    finally:
        utility.kill()
    pid = utility.proc.pid
    names = [path.relative_to(out).as_posix() for path in files(out)]
    assert names == [f"rotating/h-{SHORT_HOST}-000000.{pid}.log.gz", f"rotating/h-{SHORT_HOST}-000001.{pid}.log.gz"]
    assert [gzip.decompress(path.read_bytes()) for path in files(out)] == [b"aaaaa\nbbbbb\n", b"ccccc\nddddd\n"]
    assert files(work) == []


def test_sighup_closes_the_file_and_the_next_message_opens_another(nsqd, tmp_path):
    utility = Utility("nsq_to_file", "--topic=hup", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--output-dir={tmp_path}", "--gzip", "--max-in-flight=1")
    try:
        publish(nsqd.http_port, "hup", b"before")
        utility.wait_for_stderr("syncing 1 records to disk")
        utility.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: gzip.decompress(files(tmp_path)[0].read_bytes()) == b"before\n", what="the closed file")
        publish(nsqd.http_port, "hup", b"after")
        wait_until(lambda: len(files(tmp_path)) == 2, what="a second file")
        assert utility.stop() == 0
    finally:
        utility.kill()
    assert [gzip.decompress(path.read_bytes()) for path in files(tmp_path)] == [b"before\n", b"after\n"]
    assert [path.name.split(".")[1][-7:] for path in files(tmp_path)] == ["-000000", "-000001"]


@pytest.mark.parametrize("skip_empty", [False, True])
def test_rotation_by_interval_with_and_without_empty_files(nsqd, tmp_path, skip_empty):
    topic = f"interval{int(skip_empty)}"
    publish(nsqd.http_port, topic, b"only")
    utility = Utility("nsq_to_file", f"--topic={topic}", f"--nsqd-tcp-address={nsqd.tcp_address}",
                      f"--output-dir={tmp_path}", "--rotate-interval=150ms", "--sync-interval=100ms",
                      *(["--skip-empty-files"] if skip_empty else []))
    try:
        utility.wait_for_stderr("since last open, rotating...")
        if skip_empty:
            time.sleep(0.6)  # deliberate: ticks pass with nothing to write, and none may leave an empty file
        else:
            wait_until(lambda: len(files(tmp_path)) > 2, what="empty files rotated in")
        assert utility.stop() == 0
    finally:
        utility.kill()
    contents = [path.read_bytes() for path in files(tmp_path)]
    assert [content for content in contents if content] == [b"only\n"]
    assert (b"" in contents) is not skip_empty
    assert len(contents) == 1 if skip_empty else len(contents) > 2


def test_discovers_topics_through_lookupd_matching_the_pattern(nsqd, lookupd, tmp_path):
    for topic in ("disc_a", "disc_b", "other"):
        publish(nsqd.http_port, topic, topic.encode())
    utility = Utility("nsq_to_file", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", "--topic-pattern=^disc_",
                      f"--output-dir={tmp_path}", "--sync-interval=100ms", "--topic-refresh=500ms",
                      "--datetime-format=%Y")
    try:
        wait_until(lambda: len(files(tmp_path)) == 2 and all(path.stat().st_size for path in files(tmp_path)),
                   what="two archived topics")
        publish(nsqd.http_port, "disc_c", b"later")
        wait_until(lambda: len(files(tmp_path)) == 3, what="a topic created later")
        assert utility.stop() == 0
    finally:
        utility.kill()
    year = time.strftime("%Y")
    assert {path.name: path.read_bytes() for path in files(tmp_path)} == {
        f"disc_a.{SHORT_HOST}.{year}.log": b"disc_a\n", f"disc_b.{SHORT_HOST}.{year}.log": b"disc_b\n",
        f"disc_c.{SHORT_HOST}.{year}.log": b"later\n"}
    assert "WARNING: skipping topic other (doesn't match pattern ^disc_)" in "".join(utility.stderr)
