"""Start this project's nsqd on a free loopback port for a benchmark."""

import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _drain(stream) -> None:
    for _ in stream:
        pass


def start_nsqd(*args: str) -> tuple[subprocess.Popen, str]:
    """The process and its TCP address; its log is read (and dropped) so it never blocks."""
    proc = subprocess.Popen([sys.executable, "-m", "nsqd", "--tcp-address=127.0.0.1:0", *args],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        match = re.search(r"TCP: listening on (127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return proc, match.group(1)
    raise RuntimeError("nsqd did not start")
