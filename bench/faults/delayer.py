"""The NFQUEUE delayer of bench/faults/net.py: holds each queued packet for a delay, then
accepts it. Standard library only (raw nfnetlink over an ``AF_NETLINK`` socket), no netem.

    python3 delayer.py --queue N --delay-ms 50 --jitter-ms 10 [--max-held 2048]
                       [--owner-pid PID] [--seed S] [--nice N]

Run by net.py inside the switch namespace (``ip netns exec <switch> python3 delayer.py ...``);
iptables rules there send the chosen packets to ``NFQUEUE --queue-num N --queue-bypass``.

How it works
    It binds queue N of its network namespace (nfnetlink_queue; queue numbers are per
    namespace), asks for the first 20 bytes of each packet (the IPv4 header: enough for the
    addresses) and sets the kernel's queue length to ``--max-held``. Each packet received
    gets a due time ``arrival + delay + uniform(-jitter, +jitter)`` (never before its
    arrival), raised if needed to the due time of the packet before it on the same path
    (same IPv4 source and destination): a path is FIFO, as a real link is, so jitter never
    reorders the packets of one path (nor of one TCP connection); packets of different paths
    are independent. At its due time the packet gets an ``NF_ACCEPT`` verdict (several
    verdicts go out in one netlink datagram). The kernel gives GSO packets unsegmented
    (``NFQA_CFG_F_GSO``): a TCP bulk transfer over veth is a few large packets, not many
    small ones.

Bounds
    At most ``--max-held`` packets are held at once: it is the kernel queue's length (packets
    waiting for a verdict count against it), and a packet arriving at a full queue is
    dropped by the kernel (tail drop, as a router's full buffer; ``FAIL_OPEN`` is not set).
    The socket's receive buffer (16 MiB) holds only the packets not read yet; should it
    overflow all the same (the delayer starved of CPU), the kernel drops those packets too
    (``user_dropped`` in net.py's ``queue_stats()``). Under a sustained stream on one path
    the FIFO rule pushes the delay towards ``delay + jitter``.

Ending
    SIGTERM or SIGINT: every held packet is accepted at once (none lost), then it exits 0 and
    prints one JSON line of counters on stdout. It also ends so when its parent (``--owner-pid``)
    is gone (checked every 0.5 s). If it dies without that (SIGKILL, a crash), the kernel
    drops the packets it held and, the queue having no listener, ``--queue-bypass`` lets later
    packets through undelayed: the link fails open (still lossy if a loss rule is there).

Scheduling
    It sets its niceness to ``--nice`` (default -10; needs root, else it stays as it is): on a
    loaded machine each late wake-up adds to the delay, and its CPU use is bounded by the
    packet rate (about 15 us per packet).

Output: ``ready`` on stdout once the queue is bound; the JSON counters at the end; errors on
stderr.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 2
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_PAYLOAD = 10
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_GSO = 0x4
NF_ACCEPT = 1

NLMSGHDR = struct.Struct("=IHHII")
NLATTR = struct.Struct("=HH")
VERDICTS_PER_SEND = 256
COPY_RANGE = 20  # the IPv4 header without options: source and destination addresses


def _nla(kind: int, payload: bytes) -> bytes:
    size = NLATTR.size + len(payload)
    return NLATTR.pack(size, kind) + payload + b"\0" * (-size % 4)


def _msg(kind: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST, seq: int = 0) -> bytes:
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + attrs
    return (
        NLMSGHDR.pack(NLMSGHDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0)
        + body
    )


def _verdict(queue: int, packet_id: int) -> bytes:
    return _msg(
        NFQNL_MSG_VERDICT, queue, _nla(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
    )


class Delayer:
    def __init__(
        self, queue: int, delay_s: float, jitter_s: float, max_held: int, seed: int | None
    ):
        self.queue = queue
        self.delay = delay_s
        self.jitter = jitter_s
        self.max_held = max_held
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.heap: list[tuple[float, int]] = []  # (due, packet id): ids rise, so ties keep order
        self.last_due: dict[bytes, float] = {}  # path (source + destination) -> latest due time
        self.stats = {"received": 0, "accepted": 0, "max_held": 0, "netlink_errors": 0}
        self.seq = 0

    # --- set-up ---------------------------------------------------------------------------
    def _config(self, attrs: bytes) -> None:
        self.seq += 1
        self.sock.send(
            _msg(NFQNL_MSG_CONFIG, self.queue, attrs, NLM_F_REQUEST | NLM_F_ACK, self.seq)
        )
        while True:
            data = self.sock.recv(65536)
            for kind, payload in self._messages(data):
                if kind == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", payload)
                    if err:
                        raise OSError(
                            -err, f"nfqueue config of queue {self.queue}: {os.strerror(-err)}"
                        )
                    return

    def bind(self) -> None:
        self.sock.bind((0, 0))
        try:  # room for the packets not read yet, should it fall behind for a while
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self._config(_nla(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
        self._config(_nla(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_RANGE, NFQNL_COPY_PACKET)))
        self._config(_nla(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", self.max_held)))
        self._config(
            _nla(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))
            + _nla(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
        )
        # a full socket buffer must not make recv() fail: the kernel drops, we carry on
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.setblocking(False)

    @staticmethod
    def _messages(data: bytes):
        offset = 0
        while offset + NLMSGHDR.size <= len(data):
            length, kind, _flags, _seq, _pid = NLMSGHDR.unpack_from(data, offset)
            if length < NLMSGHDR.size:
                break
            yield kind, data[offset + NLMSGHDR.size : offset + length]
            offset += (length + 3) & ~3

    # --- the loop -------------------------------------------------------------------------
    def _receive(self, now: float) -> None:
        sock = self.sock
        heap = self.heap
        last_due = self.last_due
        delay, jitter, uniform = self.delay, self.jitter, self.rng.uniform
        packet_kind = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            for kind, body in self._messages(data):
                if kind != packet_kind:
                    if kind == NLMSG_ERROR and struct.unpack_from("=i", body)[0]:
                        self.stats["netlink_errors"] += 1
                    continue
                packet_id = None
                path = b""
                offset = 4  # after struct nfgenmsg
                while offset + 4 <= len(body):
                    size, attr = NLATTR.unpack_from(body, offset)
                    if size < 4:
                        break
                    attr &= 0x3FFF
                    if attr == NFQA_PACKET_HDR:
                        packet_id = struct.unpack_from("!I", body, offset + 4)[0]
                    elif attr == NFQA_PAYLOAD and size >= 4 + 20:
                        path = body[offset + 4 + 12 : offset + 4 + 20]
                    offset += (size + 3) & ~3
                if packet_id is None:
                    continue
                due = now + max(0.0, delay + (uniform(-jitter, jitter) if jitter else 0.0))
                before = last_due.get(path)
                if before is not None and before > due:
                    due = before
                last_due[path] = due
                heapq.heappush(heap, (due, packet_id))
                self.stats["received"] += 1
            if len(heap) > self.stats["max_held"]:
                self.stats["max_held"] = len(heap)

    def _release(self, until: float) -> None:
        heap = self.heap
        out: list[bytes] = []
        while heap and heap[0][0] <= until:
            out.append(_verdict(self.queue, heapq.heappop(heap)[1]))
            if len(out) >= VERDICTS_PER_SEND:
                self._send(out)
                out = []
        if out:
            self._send(out)

    def _send(self, verdicts: list[bytes]) -> None:
        data = b"".join(verdicts)
        while True:
            try:
                self.sock.send(data)
                break
            except BlockingIOError:
                select.select([], [self.sock], [], 0.01)
        self.stats["accepted"] += len(verdicts)

    def run(self, owner_pid: int | None, wake_fd: int) -> None:
        sock = self.sock.fileno()
        next_owner_check = 0.0
        while True:
            now = time.monotonic()
            if now >= next_owner_check:
                if owner_pid is not None and os.getppid() != owner_pid:
                    return
                next_owner_check = now + 0.5
                if len(self.last_due) > 1024:  # forget paths that are idle
                    self.last_due = {p: d for p, d in self.last_due.items() if d > now}
            timeout = next_owner_check - now
            if self.heap:
                timeout = min(timeout, self.heap[0][0] - now)
            if timeout > 0:
                readable, _, _ = select.select([sock, wake_fd], [], [], timeout)
                if wake_fd in readable:
                    return
                now = time.monotonic()
                if readable:
                    self._receive(now)
            self._release(time.monotonic() + 0.0002)

    def flush_and_close(self) -> None:
        """Accept every held packet now, unbind, close."""
        try:
            self._receive(time.monotonic())  # what came in since the last wake-up
            self._release(float("inf"))
            self.sock.send(
                _msg(
                    NFQNL_MSG_CONFIG,
                    self.queue,
                    _nla(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)),
                )
            )
        finally:
            self.sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--max-held", type=int, default=2048)
    parser.add_argument("--owner-pid", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--nice", type=int, default=-10, help="scheduling niceness (root)")
    args = parser.parse_args(argv)
    if args.delay_ms < 0 or args.jitter_ms < 0 or args.max_held < 1:
        parser.error("delay and jitter must be >= 0, max-held >= 1")

    try:  # on a loaded machine a late wake-up is extra delay: run ahead of ordinary work
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    except OSError:
        pass
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # the wake-up fd does the work

    delayer = Delayer(
        args.queue, args.delay_ms / 1000, args.jitter_ms / 1000, args.max_held, args.seed
    )
    delayer.bind()
    print("ready", flush=True)
    try:
        delayer.run(args.owner_pid, read_fd)
    finally:
        delayer.flush_and_close()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats = dict(delayer.stats, cpu_s=round(usage.ru_utime + usage.ru_stime, 3))
        print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
