"""``make run``: a local NSQ cluster in the foreground (``python -m deploy.run_local --help``).

nsqlookupd starts first; once it listens, N nsqd registered with it (each with a data directory of
its own) and nsqadmin; then every address and the nsqadmin URL are printed. Every line of output
says where it came from (``nsqd-1     | ...``, ``launcher   | ...``); a daemon that dies is
reported at once with its exit status, and the others go on. Ctrl-C (or SIGTERM, SIGHUP) stops
the nsqd first, so they flush their queues to disk and their last UNREGISTERs still reach
nsqlookupd, then nsqadmin, then nsqlookupd; a second Ctrl-C kills whatever is still running.
The exit status is 0 when a stop signal ended the cluster and every daemon exited 0.
"""

import argparse
import signal
import sys
from pathlib import Path

from . import local_cluster
from .local_cluster import Ports
from .supervisor import Child, Supervisor
from .terminal import terminal_to_ourselves

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the console scripts of the virtualenv running this
START_SECONDS = 30.0
STOP_SECONDS = 30.0


def port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0 lets the system pick one)")
    return port


def count(text: str) -> int:
    count = int(text)
    if not 1 <= count <= 100:
        raise argparse.ArgumentTypeError(f"{count}: run 1 to 100 nsqd")
    return count


def parse_options(argv: list[str] | None) -> argparse.Namespace:
    defaults = Ports()
    parser = argparse.ArgumentParser(
        prog="python -m deploy.run_local", description="Run nsqlookupd, N nsqd registered with it and nsqadmin "
        f"on {local_cluster.HOST}, in the foreground; Ctrl-C stops them all. Through make: make run ARGS='--nsqd 3'.",
        epilog=f"nsqd number n listens on the nsqd base ports + {local_cluster.PORT_STEP} * (n - 1). "
        "A port of 0 lets the system pick a free one.")
    parser.add_argument("--nsqd", type=count, default=2, metavar="N", help="how many nsqd to run (default 2)")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", metavar="DIR",
                        help="nsqd n keeps its data in DIR/nsqd<n>, nsqadmin its stats history in "
                        "DIR/nsqadmin/stats (default: data/ in the repository)")
    for name, default in vars(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}-port", type=port, dest=name, metavar="PORT",
                            help=f"(default {default})")
    parser.add_argument("--ephemeral-ports", action="store_true",
                        help="let the system pick every port not given (to run beside another cluster, or in tests)")
    opts = parser.parse_args(argv)
    fallback = {name: 0 if opts.ephemeral_ports else default for name, default in vars(defaults).items()}
    opts.ports = Ports(**{name: fallback[name] if getattr(opts, name) is None else getattr(opts, name)
                          for name in fallback})
    for base in (opts.ports.nsqd_tcp, opts.ports.nsqd_http):
        if local_cluster.nsqd_port(base, opts.nsqd) > 65535:
            parser.error(f"nsqd number {opts.nsqd} would listen on port {local_cluster.nsqd_port(base, opts.nsqd)}")
    opts.data_dir = opts.data_dir.resolve()
    return opts


def _wait_until_listening(sup: Supervisor, children: list[Child]) -> bool:
    """Whether every one of ``children`` listens, before a stop signal, a death or START_SECONDS."""
    done = sup.run_until(lambda: all(child.listening for child in children) or sup.signals or sup.died,
                         START_SECONDS)
    if not done:
        late = [child.label for child in children if not child.listening]
        sup.say(f"not listening after {START_SECONDS:g}s: {', '.join(late)}")
    return done and not sup.signals and not sup.died


def _summary(lookupd: Child, nsqds: list[Child], admin: Child, data_dir: Path) -> str:
    width = len(max((child.label for child in [lookupd, *nsqds, admin]), key=len)) + 1
    lines = [f"{'nsqlookupd:':<{width}} TCP {lookupd.addresses['TCP']}, HTTP http://{lookupd.addresses['HTTP']}"]
    for n, nsqd in enumerate(nsqds, start=1):
        lines.append(f"{nsqd.label + ':':<{width}} TCP {nsqd.addresses['TCP']}, HTTP http://{nsqd.addresses['HTTP']}, "
                     f"data {local_cluster.nsqd_data_dir(data_dir, n)}")
    lines.append(f"{'nsqadmin:':<{width}} http://{admin.addresses['HTTP']}/  (open it in a browser; stats history "
                 f"in {local_cluster.stats_dir(data_dir)}, recorded every 10s, rolled up by Spark every minute)")
    lines.append("press Ctrl-C to stop")
    return "\n".join(lines)


def _start_cluster(opts: argparse.Namespace, sup: Supervisor) -> None:
    lookupd = sup.start(local_cluster.nsqlookupd(opts.ports))
    if not _wait_until_listening(sup, [lookupd]):
        return
    for n in range(1, opts.nsqd + 1):
        local_cluster.nsqd_data_dir(opts.data_dir, n).mkdir(parents=True, exist_ok=True)
    nsqds = [sup.start(local_cluster.nsqd(n, opts.ports, opts.data_dir, lookupd.addresses["TCP"]))
             for n in range(1, opts.nsqd + 1)]
    admin = sup.start(local_cluster.nsqadmin(opts.ports, opts.data_dir, lookupd.addresses["HTTP"]))
    if _wait_until_listening(sup, [*nsqds, admin]):
        sup.say(_summary(lookupd, nsqds, admin, opts.data_dir))
        sup.run_until(lambda: sup.signals or not any(child.running for child in sup.children))


def run(opts: argparse.Namespace, sup: Supervisor) -> int:
    """Start the cluster, run it until a stop signal, stop it in order; the exit status."""
    try:
        _start_cluster(opts, sup)
    except OSError as exc:
        sup.say(f"cannot start a daemon: {exc} (`make run` installs them into .venv)")
    for program in ("nsqd", "nsqadmin", "nsqlookupd"):
        sup.stop([child for child in sup.children if child.daemon.program == program], STOP_SECONDS)
    # A daemon still starting has no handler yet, so the SIGTERM it was sent ends it: a clean stop too.
    clean = bool(sup.signals) and not sup.died and all(child.status in (0, -signal.SIGTERM) for child in sup.children)
    sup.say("all stopped" if clean else "all stopped; exit status 1 (see above)")
    return 0 if clean else 1


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(argv)
    with Supervisor(local_cluster.labels(opts.nsqd), sys.stdout.buffer, BIN) as sup, terminal_to_ourselves():
        return run(opts, sup)


if __name__ == "__main__":
    sys.exit(main())
