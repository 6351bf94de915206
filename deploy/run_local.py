"""Run a local cluster in the foreground; Ctrl-C stops every process cleanly.

Until nsqlookupd lands this starts one nsqd; its data directory is ./data/nsqd1.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

NODES = [
    ("nsqd", ["--tcp-address=127.0.0.1:4150", "--http-address=127.0.0.1:4151", "--data-path=data/nsqd1"]),
]


def main() -> int:
    (ROOT / "data" / "nsqd1").mkdir(parents=True, exist_ok=True)
    procs = []
    for name, args in NODES:
        procs.append(subprocess.Popen([str(BIN / name), *args], cwd=ROOT))
        print(f"started {name} {' '.join(args)} (pid {procs[-1].pid})", flush=True)
    print("nsqd TCP: 127.0.0.1:4150, HTTP: http://127.0.0.1:4151 -- press Ctrl-C to stop", flush=True)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping and all(proc.poll() is None for proc in procs):
        time.sleep(0.2)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes = [proc.wait(timeout=30) for proc in procs]
    print(f"stopped (exit codes {codes})", flush=True)
    return 0 if stopping and all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
