"""A lossy, slow wire between two network namespaces, in user space, for kernels without
``tc netem`` (tests/netns.py's ``Network.impaired_link``).

    python -m tests.wire NETNS_A DEVICE_A NETNS_B DEVICE_B --loss=0.2 --delay=0.2 --seed=1

Theory of operation: a tun device is made in each namespace (a NETNS path, or "" for this
process's own). setns(2) moves only the calling thread, and a tun belongs to the namespace its
/dev/net/tun was opened in, so this single-threaded process steps into each namespace in turn,
opens and names its tun there, and steps back; from then on the two descriptors are the link's
two ends, whatever namespace the process is in. Each IP packet read from one end is dropped
with probability ``loss`` (one seeded generator per direction, so a run's drops repeat for
the same packets) or written to the other end ``delay`` seconds later; the delay is the same
for every packet, so one FIFO queue holds both directions in order of their due times. A
packet the other end cannot take (its device set down: a cut) is dropped, as a wire would.

It prints "ready" once both devices exist (the caller then gives them addresses and sets them
up) and ends when its standard input closes, so it never outlives the test that started it.
"""

import argparse
import collections
import ctypes
import fcntl
import os
import random
import select
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000  # raw IP packets, no 4-byte packet information header
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns into {what}")


def open_tun(netns: str, device: str) -> int:
    """A new tun device named ``device`` in the namespace at path ``netns`` ("" for ours); its fd."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY) if netns else None
    try:
        if target is not None:
            _setns(target, netns)
        tun = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", device.encode(), IFF_TUN | IFF_NO_PI))
        return tun
    finally:
        if target is not None:
            _setns(own, "this process's own namespace")
            os.close(target)
        os.close(own)


class Wire:
    def __init__(self, end_a: int, end_b: int, loss: float, delay: float, seed: int):
        self.other = {end_a: end_b, end_b: end_a}
        self.drops = {end_a: random.Random(f"{seed} a to b"), end_b: random.Random(f"{seed} b to a")}
        self.loss, self.delay = loss, delay
        self.queue: collections.deque[tuple[float, int, bytes]] = collections.deque()

    def take(self, end: int) -> None:
        """Every packet waiting at ``end``: each dropped or queued for the other end."""
        while True:
            try:
                packet = os.read(end, 65536)
            except BlockingIOError:
                return
            if self.drops[end].random() >= self.loss:
                self.queue.append((time.monotonic() + self.delay, self.other[end], packet))

    def deliver_due(self) -> float | None:
        """Write every packet whose time has come; seconds until the next one (None: none queued)."""
        while self.queue:
            due, end, packet = self.queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                return wait
            self.queue.popleft()
            try:
                os.write(end, packet)
            except OSError:  # that end is down (a cut) or its queue is full: the packet is lost
                pass
        return None

    def run(self, stop: int) -> None:
        """Until ``stop`` (a pipe) is readable: its writer closed it or went away."""
        ends = list(self.other)
        while True:
            readable, _, _ = select.select([*ends, stop], [], [], self.deliver_due())
            if stop in readable:
                return
            for end in readable:
                self.take(end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("netns_a")
    parser.add_argument("device_a")
    parser.add_argument("netns_b")
    parser.add_argument("device_b")
    parser.add_argument("--loss", type=float, default=0.0, help="the probability that a packet is dropped")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each packet spends on the wire")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    wire = Wire(open_tun(args.netns_a, args.device_a), open_tun(args.netns_b, args.device_b),
                args.loss, args.delay, args.seed)
    print("ready", flush=True)
    wire.run(sys.stdin.fileno())


if __name__ == "__main__":
    main()
