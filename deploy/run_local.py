"""Run a local cluster in the foreground: one nsqlookupd, two nsqd registered with it, and nsqadmin.

Data directories are ./data/nsqd1 and ./data/nsqd2, and nsqadmin keeps its stats history in
./data/nsqadmin/stats; everything listens on 127.0.0.1.
Ctrl-C (or SIGTERM) stops every process gracefully, nsqadmin and the nsqd first so that
the nsqd's last UNREGISTERs still reach nsqlookupd; the exit status is 0 when all of
them exit 0.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

LOOKUPD = ("nsqlookupd", ["--tcp-address=127.0.0.1:4160", "--http-address=127.0.0.1:4161",
                          "--broadcast-address=127.0.0.1"])
NSQDS = [
    ("nsqd", [f"--tcp-address=127.0.0.1:{4150 + 100 * n}", f"--http-address=127.0.0.1:{4151 + 100 * n}",
              f"--data-path=data/nsqd{n + 1}", "--broadcast-address=127.0.0.1",
              "--lookupd-tcp-address=127.0.0.1:4160"])
    for n in range(2)
]
ADMIN = ("nsqadmin", ["--http-address=127.0.0.1:4171", "--lookupd-http-address=127.0.0.1:4161",
                      "--stats-dir=data/nsqadmin/stats"])


def start(name: str, args: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([str(BIN / name), *args], cwd=ROOT)
    print(f"started {name} {' '.join(args)} (pid {proc.pid})", flush=True)
    return proc


def main() -> int:
    for n in range(len(NSQDS)):
        (ROOT / "data" / f"nsqd{n + 1}").mkdir(parents=True, exist_ok=True)
    lookupd = start(*LOOKUPD)
    time.sleep(0.5)
    nsqds = [start(name, args) for name, args in NSQDS]
    admin = start(*ADMIN)
    print("\nnsqlookupd: TCP 127.0.0.1:4160, HTTP http://127.0.0.1:4161\n"
          "nsqd 1:     TCP 127.0.0.1:4150, HTTP http://127.0.0.1:4151, data ./data/nsqd1\n"
          "nsqd 2:     TCP 127.0.0.1:4250, HTTP http://127.0.0.1:4251, data ./data/nsqd2\n"
          "nsqadmin:   http://127.0.0.1:4171/  (open it in a browser; stats history in ./data/nsqadmin/stats,\n"
          "            recorded every 10s, rolled up by Spark every minute)\n"
          "press Ctrl-C to stop\n", flush=True)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    everything = [admin, *nsqds, lookupd]
    while not stopping and all(proc.poll() is None for proc in everything):
        time.sleep(0.2)
    codes = []
    for proc in everything:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        codes.append(proc.wait(timeout=60))
    print(f"stopped (exit codes {codes})", flush=True)
    return 0 if stopping and all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
