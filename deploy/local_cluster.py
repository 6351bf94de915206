"""What ``make run`` starts: nsqlookupd, N nsqd registered with it, and nsqadmin, on 127.0.0.1.

nsqd number n (from 1) listens on the base ports + PORT_STEP * (n - 1) (4150/4151, 4250/4251, ...)
and keeps its data in DATA_DIR/nsqd<n>, with --node-id=n: nsqd's default node ID is a hash of the
host name, the same for every nsqd on one host, so without it their message IDs could collide. nsqadmin keeps its stats history in DATA_DIR/nsqadmin/stats.
A port of 0 lets the system pick a free one; the launcher reads the real one from the daemon's log.
"""

from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
PORT_STEP = 100


@dataclass(frozen=True)
class Ports:
    lookupd_tcp: int = 4160
    lookupd_http: int = 4161
    nsqd_tcp: int = 4150
    nsqd_http: int = 4151
    nsqadmin_http: int = 4171


@dataclass(frozen=True)
class Daemon:
    """One process of the cluster: its label in the logs, its console script, its flags, and the
    listeners (``TCP``, ``HTTP``) it must report before it counts as up."""

    label: str
    program: str
    flags: tuple[str, ...]
    listeners: tuple[str, ...]


def _address(port: int) -> str:
    return f"{HOST}:{port}"


def nsqd_port(base: int, n: int) -> int:
    return base + PORT_STEP * (n - 1) if base else 0


def nsqd_label(n: int) -> str:
    return f"nsqd-{n}"


def nsqd_data_dir(data_dir: Path, n: int) -> Path:
    return data_dir / f"nsqd{n}"


def stats_dir(data_dir: Path) -> Path:
    return data_dir / "nsqadmin" / "stats"


def nsqlookupd(ports: Ports) -> Daemon:
    return Daemon("nsqlookupd", "nsqlookupd",
                  (f"--tcp-address={_address(ports.lookupd_tcp)}", f"--http-address={_address(ports.lookupd_http)}",
                   f"--broadcast-address={HOST}"),
                  ("TCP", "HTTP"))


def nsqd(n: int, ports: Ports, data_dir: Path, lookupd_tcp_address: str) -> Daemon:
    return Daemon(nsqd_label(n), "nsqd",
                  (f"--tcp-address={_address(nsqd_port(ports.nsqd_tcp, n))}",
                   f"--http-address={_address(nsqd_port(ports.nsqd_http, n))}",
                   f"--data-path={nsqd_data_dir(data_dir, n)}", f"--broadcast-address={HOST}",
                   f"--lookupd-tcp-address={lookupd_tcp_address}", f"--node-id={n}"),
                  ("TCP", "HTTP"))


def nsqadmin(ports: Ports, data_dir: Path, lookupd_http_address: str) -> Daemon:
    return Daemon("nsqadmin", "nsqadmin",
                  (f"--http-address={_address(ports.nsqadmin_http)}",
                   f"--lookupd-http-address={lookupd_http_address}", f"--stats-dir={stats_dir(data_dir)}"),
                  ("HTTP",))


def labels(nsqd_count: int) -> list[str]:
    """Every daemon's label, in the order they start."""
    return ["nsqlookupd", *(nsqd_label(n) for n in range(1, nsqd_count + 1)), "nsqadmin"]
