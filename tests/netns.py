"""A small network built inside a test: Linux network namespaces joined by veth pairs, with
daemons started in them and client sockets opened from them (tests/test_partitions.py).

Every address is link-local (169.254.0.0/16, never routed off a link), every link a /30 of
its own, and each namespace only reaches the ones it has a link to. The test process stays
in the root namespace, which has a link to each namespace it must observe. ``Network`` is a
context manager: leaving it kills the daemons and deletes the namespaces (and so their
links), whether the test passed or not; the namespaces carry this process's ID in their
names, so concurrent runs never meet.

Cutting a link sets one end down: packets the other end sends are dropped without a word
(its side stays up, without carrier), as in a partition; the end that went down sees its
routes go. An impaired link (loss, delay) is a tun device at each end joined by a wire
process in user space (tests/wire.py), not ``tc netem``: netem is often left out of kernels
(this machine's and CI's lack sch_netem), tun rarely is. ``round_trips`` pings across a link,
so a test can check the impairment is really there.

``skip_reason()`` says in one line why this machine cannot build such a network, or None;
``tun_missing()`` the same for an impaired link.
"""

import contextlib
import ctypes
import itertools
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import time

import trio

from .helpers import ROOT, RawClient

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_reason: list[str | None] = []
_networks = itertools.count()
_first_octet = random.randrange(224)


def skip_reason() -> str | None:
    """Why network namespaces cannot be used here (checked once: one namespace made and deleted)."""
    if not _reason:
        _reason.append(_probe())
    return _reason[0]


def _probe() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's, this is {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    name = f"nsqprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' was refused: {made.stderr.strip()}"
    try:
        pair = subprocess.run(["ip", "-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
                              capture_output=True, text=True)
        if pair.returncode != 0:
            return f"'ip link add ... type veth' was refused: {pair.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return None


def tun_missing() -> str | None:
    """Why an impaired link (tun devices) cannot be made here, or None."""
    if skip_reason() is not None:
        return skip_reason()
    try:
        os.close(os.open("/dev/net/tun", os.O_RDWR))
    except OSError as error:
        return f"an impaired link needs tun devices, and /dev/net/tun cannot be opened ({error.strerror})"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Link:
    """A veth pair between two namespaces ("" for the root one), with an address at each end."""

    def __init__(self, network: "Network", a: str, b: str, subnet: int):
        self.ends = {a: (network.device(), f"169.254.{network.octet}.{subnet * 4 + 1}"),
                     b: (network.device(), f"169.254.{network.octet}.{subnet * 4 + 2}")}
        self.network = network
        self.make(a, b)
        for side, (device, address) in self.ends.items():
            self.run(side, "addr", "add", f"{address}/30", "dev", device)
            self.run(side, "link", "set", device, "up")

    def make(self, a: str, b: str) -> None:
        """The two devices, each in its namespace."""
        _ip("link", "add", self.device(a), "type", "veth", "peer", "name", self.device(b))
        for side in (a, b):
            if side:
                _ip("link", "set", self.device(side), "netns", self.network.name(side))

    def run(self, side: str, *args: str) -> None:
        _ip(*(("-n", self.network.name(side)) if side else ()), *args)

    def address(self, side: str) -> str:
        return self.ends[side][1]

    def device(self, side: str) -> str:
        return self.ends[side][0]

    def cut(self, side: str) -> None:
        """Set ``side``'s end down: the other side's packets vanish."""
        self.run(side, "link", "set", self.device(side), "down")

    def heal(self, side: str) -> None:
        self.run(side, "link", "set", self.device(side), "up")


class ImpairedLink(Link):
    """A link that drops each packet with probability ``loss`` and carries the rest ``delay``
    seconds late, each way: a tun device at each end, joined by tests/wire.py."""

    def __init__(self, network: "Network", a: str, b: str, subnet: int, loss: float, delay: float, seed: int):
        self.impairment = {"loss": loss, "delay": delay, "seed": seed}
        super().__init__(network, a, b, subnet)

    def make(self, a: str, b: str) -> None:
        ends = [arg for side in (a, b) for arg in (self.network.path(side), self.device(side))]
        wire = subprocess.Popen([sys.executable, "-m", "tests.wire", *ends,
                                 *(f"--{name}={value}" for name, value in self.impairment.items())],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.network.processes.append(wire)
        ready, _, _ = select.select([wire.stdout], [], [], 30)
        if not ready or wire.stdout.readline() != b"ready\n":
            wire.kill()
            raise RuntimeError(f"the wire did not start: {wire.communicate()[1].decode().strip()}")
        for side in (a, b):  # no IPv6 chatter (router solicitations at random moments): the seed decides alone
            self.run(side, "link", "set", self.device(side), "addrgenmode", "none")


class Network:
    def __init__(self):
        number = next(_networks)
        self.prefix = f"nsqp{os.getpid() % 100000}{chr(97 + number % 26)}"
        self.octet = 16 + (_first_octet + number) % 224  # 169.254.octet.0/24 for this network's links
        self.namespaces: list[str] = []
        self.links: list[Link] = []
        self.processes: list[subprocess.Popen] = []
        self._devices = 0

    def name(self, namespace: str) -> str:
        return f"{self.prefix}{namespace}"

    def device(self) -> str:
        self._devices += 1
        return f"{self.prefix}v{self._devices}"

    def namespace(self, namespace: str) -> str:
        _ip("netns", "add", self.name(namespace))
        self.namespaces.append(namespace)
        _ip("-n", self.name(namespace), "link", "set", "lo", "up")
        return namespace

    def path(self, namespace: str) -> str:
        """Where ``namespace`` is bound ("" for the root one, which needs no path)."""
        return f"/run/netns/{self.name(namespace)}" if namespace else ""

    def link(self, a: str, b: str) -> Link:
        link = Link(self, a, b, len(self.links))
        self.links.append(link)
        return link

    def impaired_link(self, a: str, b: str, loss: float, delay: float, seed: int) -> ImpairedLink:
        """A link losing ``loss`` of the packets each way and delaying the rest by ``delay`` seconds."""
        link = ImpairedLink(self, a, b, len(self.links), loss, delay, seed)
        self.links.append(link)
        return link

    def start(self, namespace: str, command: list[str], log_path) -> subprocess.Popen:
        """A daemon in ``namespace`` (its output to ``log_path``); killed when the network goes."""
        log = open(log_path, "w")
        proc = subprocess.Popen(["ip", "netns", "exec", self.name(namespace), *command], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.processes.append(proc)
        return proc

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # and close its pipes, if it has any (a wire's)
        # A deleted namespace can live on, and its veth pairs with it (seen for minutes after the
        # lossy link's case: a killed daemon's connection there still retransmitting, it seems): the
        # root ends go now, lest their addresses and routes catch another network's packets.
        for link in self.links:
            if "" in link.ends:
                subprocess.run(["ip", "link", "delete", link.device("")], capture_output=True)
        for namespace in self.namespaces:  # a veth pair goes with either end's namespace
            subprocess.run(["ip", "netns", "delete", self.name(namespace)], capture_output=True)


@contextlib.contextmanager
def inside(network: Network, namespace: str):
    """This thread in ``namespace`` (sockets made now belong to it), then back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(network.path(namespace), os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into " + namespace)
        yield
    finally:
        _libc.setns(own, CLONE_NEWNET)
        os.close(own)
        os.close(target)


async def connect_from(network: Network, namespace: str, host: str, port: int, timeout: float = 5) -> RawClient:
    """A V2 client whose socket lives in ``namespace`` ("" for the test's own)."""
    with contextlib.ExitStack() as stack:
        if namespace:
            stack.enter_context(inside(network, namespace))
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with trio.fail_after(timeout):
        await sock.connect((host, port))
    client = RawClient(trio.SocketStream(sock))
    await client.send(b"  V2")
    return client


async def round_trips(network: Network, namespace: str, address: str, count: int = 50,
                      timeout: float = 3) -> dict[int, float]:
    """Ping ``address`` from ``namespace`` ``count`` times at once (ICMP echo on a raw socket):
    the round trip of each echo answered within ``timeout`` seconds, by its sequence number."""
    with contextlib.ExitStack() as stack:
        if namespace:
            stack.enter_context(inside(network, namespace))
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = random.randrange(0x10000)  # the replies to this call, whatever else pings from there
    sent: dict[int, float] = {}
    answered: dict[int, float] = {}
    with sock:
        for sequence in range(count):
            sent[sequence] = time.monotonic()
            await sock.sendto(_echo_request(ident, sequence), (address, 0))
        with trio.move_on_after(timeout):
            while len(answered) < count:
                packet = await sock.recv(65536)
                header = (packet[0] & 0x0F) * 4  # a raw socket hands over the IP header too
                kind, _, _, their_ident, sequence = struct.unpack_from("!BBHHH", packet, header)
                if kind == 0 and their_ident == ident and sequence in sent:  # an echo reply of ours
                    answered[sequence] = time.monotonic() - sent.pop(sequence)
    return answered


def _echo_request(ident: int, sequence: int) -> bytes:
    unsummed = struct.pack("!BBHHH", 8, 0, 0, ident, sequence)
    total = sum(struct.unpack("!4H", unsummed))
    while total >> 16:  # a one's complement sum: carries wrap around
        total = (total & 0xFFFF) + (total >> 16)
    return struct.pack("!BBHHH", 8, 0, ~total & 0xFFFF, ident, sequence)


async def wait_listening(host: str, port: int, timeout: float = 15) -> None:
    """Until something accepts connections at host:port (from the root namespace)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with trio.fail_after(1):
                stream = await trio.open_tcp_stream(host, port)
            await stream.aclose()
            return
        except (OSError, trio.TooSlowError):
            if time.monotonic() > deadline:
                raise
            await trio.sleep(0.05)
