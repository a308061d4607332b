"""A simulated network for fault tests: hosts in network namespaces on one Linux bridge, with
partitions, packet loss and delay applied between them.

    with Network() as net:
        a, b, c = net.add_host("a"), net.add_host("b"), net.add_host("c")
        server = subprocess.Popen(c.command(["python3", "-m", "http.server", "8000"]))
        net.cut(a, b)                 # a and b cannot talk, either way; both still reach c
        net.heal()
        net.isolate(c)                # c cut from every other host
        net.heal()
        net.lossy(loss=0.05, delay_ms=50, jitter_ms=10)          # every link
        net.lossy(loss=0.2, hosts=[a])                           # or the links of some hosts
        net.heal()                    # every fault removed
    # here every namespace, the bridge, the delayers and the processes left in the hosts are gone

Needs root, iproute2 (``ip``), iptables (Debian package ``iptables``: ``iptables-restore``,
nft or legacy backend both work) and a kernel with network namespaces, veth, bridge
netfilter (br_netfilter) and nfnetlink_queue. ``unavailable_reason()`` says what is missing.
No netem and nothing from PyPI: the delayer (delayer.py beside this file) speaks nfnetlink
itself with the standard library.

Topology
    One *switch* namespace ``<id>-sw`` holds a bridge ``br0``. Each host is a namespace
    ``<id>-<name>`` with loopback up and one interface ``eth0``, a veth whose other end
    ``p<N>`` is a port of the bridge; its IPv4 address is the next one of ``subnet`` (default
    10.211.0.0/24: .1, .2, ...). The id is ``<prefix>-<pid>-<4 hex digits>`` (default prefix
    ``hrnet``), so two Networks, of one process or of several, never share a name; interface
    names exist only inside these namespaces, and nothing is added to the root namespace (no
    address, route, interface or rule). IPv6 is off on ``eth0`` (so every packet between
    hosts is IPv4 and the iptables rules see them all; ``::1`` stays on loopback). Hosts reach
    each other only: not the root namespace's 127.0.0.1, nor anything outside.

Where the faults live
    All in the switch namespace, in its iptables filter table, FORWARD chain, on bridged
    packets: ``net.bridge.bridge-nf-call-iptables`` is per network namespace (checked on
    Linux 6.18: setting it in one namespace leaves the others as they were) and is set to 1
    there only. Rules match bridge ports (``-m physdev``), so a fault affects exactly the
    host pairs asked for. The whole table is rewritten atomically with ``iptables-restore``
    at each change::

        FORWARD -> HR-CUT    DROP for each cut pair, both directions
                -> HR-LOSSY  per lossy() profile, first match: jump to HR-L<n>
        HR-L<n>:  -m statistic --mode random --probability LOSS -j DROP
                  then -j NFQUEUE --queue-num n --queue-bypass (when delayed), else ACCEPT

    A cut drops IPv4 only (ARP still passes). A lossy profile applies once per packet to every
    packet from or to one of its hosts (all hosts when ``hosts=None``): loss and delay are per
    packet and per direction, so a round trip through a profile of ``delay_ms=50`` takes
    about 100 ms more, and ``loss=0.3`` leaves about 0.7 of one-way datagrams and 0.49 of
    request-reply pairs.

How delay works (no netem)
    Each delayed profile has its own delayer process (delayer.py), run in the switch
    namespace with ``ip netns exec``, bound to the profile's queue number (queue numbers are
    per namespace). It holds each packet for ``delay +/- uniform(jitter)`` and then accepts
    it; per path (IPv4 source -> destination) it is FIFO, so jitter never reorders the packets
    of one path: a later packet waits at least until the one before it is released (under a
    steady stream the delay so tends to delay + jitter); different paths are independent.
    Loss is applied before the queue, by the kernel. Delayers run at nice -10, as a late
    wake-up on a loaded machine is extra delay (measured with the machine's load average at
    8 on 2 cores, 50 +/- 10 ms one way at 1 packet/ms: min 47, median 55.5, max 60 ms).

Bounds and failure
    A delayer holds at most ``max_held`` packets (default 2048; the kernel queue's length):
    beyond that the kernel drops new packets (tail drop, like a router's full buffer;
    ``queue_stats()`` counts them). GSO packets are queued unsegmented, so a TCP bulk
    transfer is a few large packets. Measured on a 2-core VM (Linux 6.18, shared, load
    average 3 to 9): a delayer costs 15-17 us of CPU per packet, so about 60k packets/s on a
    whole core (extrapolated). One TCP bulk stream through 1 ms of delay: 750-940 MB/s with
    GSO (undelayed 1-1.8 GB/s; 14-20k packets/s, 30-42 % of a core); with GSO off
    (MTU-sized packets) 28-43 MB/s against 38-54 MB/s undelayed (20-35k packets/s, 30-61 %
    of a core). Through 50 +/- 10 ms: 21-23 MB/s (TCP window limited), 2-4 % of a core;
    with GSO off that stream held up to 1776 packets: raise ``max_held`` for faster paths
    without GSO (it must cover packets/s times the delay).

    ``heal()`` and ``close()`` first remove the rules, then stop the delayers with SIGTERM: a
    delayer then releases every packet it holds at once and exits. A delayer also exits by
    itself when the process that started it is gone (``--owner-pid``). If one dies otherwise
    (SIGKILL, crash), the packets it held are dropped and, with ``--queue-bypass``, later
    packets pass undelayed: it fails *open*, loss rules still applying; ``check()`` raises
    if a delayer has died.

Clean-up
    ``close()`` (and ``__exit__``, and a finalizer at interpreter exit) stops the delayers,
    SIGKILLs every process still in the Network's namespaces (those started with
    ``host.command``) and deletes the namespaces, which removes the veths and the bridge.
    A record ``/run/headrace-netfaults/<id>`` names the owner (pid and start time);
    ``cleanup_stale()`` (also called by each new Network) removes the namespaces and
    processes of Networks whose owner is dead (SIGKILLed test runs), and nothing of a live one.

Not thread-safe: use a Network from one thread at a time.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

DEFAULT_PREFIX = "hrnet"
DEFAULT_SUBNET = "10.211.0.0/24"
DELAYER = Path(__file__).resolve().with_name("delayer.py")
STATE_DIR = Path("/run/headrace-netfaults")
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_]{1,24}$")


class NetError(RuntimeError):
    """A command that sets up or changes the network failed, or a delayer died."""


def unavailable_reason(probe: bool = False) -> str | None:
    """Why a Network cannot be made here, or None if it can. With ``probe``, also makes and
    deletes a namespace (root without the capability to, as in some containers, fails
    there); otherwise it has no side effects."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("iptables-restore", "iptables")):
        if shutil.which(tool) is None:
            return f"no `{tool}` (Debian package {package})"
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        return "no bridge netfilter (br_netfilter not loaded: modprobe br_netfilter)"
    if not Path("/proc/net/netfilter/nfnetlink_queue").exists():
        return "no NFQUEUE support (nfnetlink_queue not loaded: modprobe nfnetlink_queue)"
    try:
        _run(["ip", "netns", "list"])
    except NetError as e:
        return f"`ip netns` does not work: {e}"
    if probe:
        # named as a Network's namespace would be, so cleanup_stale() finds a leftover
        ns = f"{DEFAULT_PREFIX}-{os.getpid()}-{secrets.token_hex(2)}-probe"
        try:
            _run(["ip", "netns", "add", ns])
        except NetError as e:
            return f"cannot make a network namespace: {e}"
        _run(["ip", "netns", "delete", ns], check=False)
    return None


def _run(argv: list[str], input: str | None = None, check: bool = True) -> str:
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetError(f"{' '.join(argv)}: {e}") from e
    if check and done.returncode != 0:
        raise NetError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _ip(ns: str, *args: str) -> str:
    """``ip -n <ns> args...``: iproute2 acting inside namespace ``ns``."""
    return _run(["ip", "-n", ns, *args])


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in namespace ``ns``, wait for them to go, delete it."""
    for _ in range(50):
        pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).split()]
        if not pids:
            break
        for pid in pids:
            try:  # a zombie is no longer listed: whoever started it still reaps it
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    _run(["ip", "netns", "delete", ns], check=False)


def _owner_alive(network_id: str, pid: int) -> bool:
    started = _start_time(pid)
    if started is None:
        return False
    try:
        recorded = (STATE_DIR / network_id).read_text().split()
    except OSError:
        return True  # no record: trust the pid
    return len(recorded) < 2 or recorded[1] == started


def cleanup_stale(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove what Networks of ``prefix`` left behind when their owner process died without
    close(): their processes, namespaces (hence veths and bridge) and records. Networks whose
    owner is alive are left alone. Returns the namespaces removed."""
    pattern = re.compile(rf"^({re.escape(prefix)}-(\d+)-[0-9a-f]{{4}})-")
    found: dict[str, tuple[int, list[str]]] = {}
    for ns in _namespaces():
        m = pattern.match(ns)
        if m:
            found.setdefault(m.group(1), (int(m.group(2)), []))[1].append(ns)
    if STATE_DIR.is_dir():
        for record in STATE_DIR.iterdir():
            m = pattern.match(record.name + "-")
            if m:
                found.setdefault(m.group(1), (int(m.group(2)), []))
    removed: list[str] = []
    for network_id, (pid, namespaces) in found.items():
        if _owner_alive(network_id, pid):
            continue
        # the hosts first, the switch (with the delayers) last
        for ns in sorted(namespaces, key=lambda n: n.endswith("-sw")):
            _kill_namespace(ns)
            removed.append(ns)
        (STATE_DIR / network_id).unlink(missing_ok=True)
    return removed


@dataclasses.dataclass(frozen=True)
class Host:
    """A host of a Network: its own network namespace ``ns`` with address ``ip`` on eth0."""

    name: str
    ns: str
    ip: str
    port: str  # its veth's end in the switch namespace (a bridge port)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host: ``ip netns exec <ns> argv...``. ``ip netns exec``
        execs the program, so the pid of a Popen of this list is the program's own pid."""
        return ["ip", "netns", "exec", self.ns, *argv]


@dataclasses.dataclass(eq=False)
class _Profile:
    loss: float
    delay_ms: float
    jitter_ms: float
    hosts: tuple[str, ...] | None
    queue: int | None
    delayer: subprocess.Popen[str] | None = None


def _teardown(network_id: str, namespaces: list[str], profiles: list[_Profile]) -> None:
    for profile in profiles:
        if profile.delayer is not None and profile.delayer.poll() is None:
            profile.delayer.kill()
            profile.delayer.wait()
    for ns in sorted(namespaces, key=lambda n: n.endswith("-sw")):
        _kill_namespace(ns)
    (STATE_DIR / network_id).unlink(missing_ok=True)


class Network:
    """A switch namespace with a bridge, hosts added with ``add_host``; see the module doc."""

    def __init__(
        self,
        prefix: str = DEFAULT_PREFIX,
        subnet: str = DEFAULT_SUBNET,
        clean_stale: bool = True,
    ) -> None:
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix {prefix!r}: a lowercase letter, then up to 15 of a-z0-9")
        self.subnet = ipaddress.ip_network(subnet)
        if self.subnet.version != 4:
            raise ValueError("subnet must be IPv4")
        reason = unavailable_reason()
        if reason:
            raise NetError(reason)
        if clean_stale:
            cleanup_stale(prefix)
        self.prefix = prefix
        self.id = f"{prefix}-{os.getpid()}-{secrets.token_hex(2)}"
        self.switch_ns = f"{self.id}-sw"
        self.hosts: dict[str, Host] = {}
        self.delayer_stats: list[dict] = []  # the counters of each delayer stopped so far
        self._addresses = self.subnet.hosts()
        self._cuts: set[frozenset[str]] = set()
        self._profiles: list[_Profile] = []
        self._next_queue = 0
        self._namespaces: list[str] = []  # shared with the finalizer
        self._live_profiles: list[_Profile] = []  # idem: delayers to kill at teardown
        self._closed = False
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / self.id).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        self._finalizer = weakref.finalize(
            self, _teardown, self.id, self._namespaces, self._live_profiles
        )
        try:
            self._make_switch()
        except BaseException:
            self.close()
            raise

    # --- topology ---------------------------------------------------------------------------
    def _make_switch(self) -> None:
        ns = self.switch_ns
        _run(["ip", "netns", "add", ns])
        self._namespaces.append(ns)
        self._sysctl(
            ns,
            {
                "net/ipv6/conf/all/disable_ipv6": 1,
                "net/ipv6/conf/default/disable_ipv6": 1,
                "net/bridge/bridge-nf-call-iptables": 1,
                "net/bridge/bridge-nf-call-ip6tables": 0,
                "net/bridge/bridge-nf-call-arptables": 0,
            },
        )
        _ip(ns, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        _ip(ns, "link", "set", "br0", "up")
        self._apply()

    @staticmethod
    def _sysctl(ns: str, values: dict[str, int]) -> None:
        script = " && ".join(f"echo {v} > /proc/sys/{k}" for k, v in values.items())
        _run(["ip", "netns", "exec", ns, "sh", "-c", script])

    def add_host(self, name: str) -> Host:
        """A new host ``name``: a namespace on the bridge with the subnet's next address."""
        self._check_open()
        if not _HOST_RE.match(name) or name == "sw":
            raise ValueError(f"host name {name!r}: 1 to 24 of A-Za-z0-9_, not 'sw'")
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        try:
            address = next(self._addresses)
        except StopIteration:
            raise NetError(f"subnet {self.subnet} is full") from None
        port = f"p{len(self.hosts)}"
        host = Host(name, f"{self.id}-{name}", str(address), port)
        _run(["ip", "netns", "add", host.ns])
        self._namespaces.append(host.ns)
        # eth0 is made after this, so it gets no IPv6; loopback keeps ::1
        self._sysctl(host.ns, {"net/ipv6/conf/default/disable_ipv6": 1})
        sw, ns = self.switch_ns, host.ns
        _ip(sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip(sw, "link", "set", port, "master", "br0", "up")
        _ip(ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip(ns, "link", "set", "eth0", "up")
        _ip(ns, "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def _resolve(self, host: Host | str) -> Host:
        name = host.name if isinstance(host, Host) else host
        if name not in self.hosts:
            raise KeyError(f"no host {name!r} in {self.id}")
        return self.hosts[name]

    def _resolve_many(self, hosts: Host | str | Iterable[Host | str]) -> list[Host]:
        if isinstance(hosts, Host | str):
            return [self._resolve(hosts)]
        return [self._resolve(h) for h in hosts]

    # --- faults -----------------------------------------------------------------------------
    def cut(self, a: Host | str, others: Host | str | Iterable[Host | str]) -> None:
        """Drop all IPv4 traffic between ``a`` and each of ``others``, both ways."""
        self._check_open()
        first = self._resolve(a)
        for other in self._resolve_many(others):
            if other.name != first.name:
                self._cuts.add(frozenset((first.name, other.name)))
        self._apply()

    def isolate(self, a: Host | str) -> None:
        """Cut ``a`` from every other host there is now."""
        first = self._resolve(a)
        self.cut(first, [h for h in self.hosts.values() if h.name != first.name])

    def lossy(
        self,
        loss: float = 0.05,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        hosts: Host | str | Iterable[Host | str] | None = None,
        max_held: int = 2048,
        seed: int | None = None,
    ) -> None:
        """Drop each packet from or to one of ``hosts`` (all when None) with probability
        ``loss``, and delay the others by ``delay_ms`` +/- uniform ``jitter_ms`` (one way: a
        round trip gets twice the delay). Profiles add up: a packet gets the first profile,
        in the order of the calls, whose hosts it is from or to. ``max_held`` bounds the
        packets a delayer holds (over it the kernel drops); ``seed`` makes its jitter
        repeatable (the loss is the kernel's)."""
        self._check_open()
        if not 0.0 <= loss < 1.0:
            raise ValueError("loss must be in [0, 1)")
        if delay_ms < 0 or jitter_ms < 0 or max_held < 1:
            raise ValueError("delay_ms and jitter_ms must be >= 0, max_held >= 1")
        names = None if hosts is None else tuple(h.name for h in self._resolve_many(hosts))
        profile = _Profile(loss, delay_ms, jitter_ms, names, None)
        if delay_ms > 0 or jitter_ms > 0:
            profile.queue = self._next_queue
            self._next_queue += 1
            profile.delayer = self._start_delayer(
                profile.queue, delay_ms, jitter_ms, max_held, seed
            )
            self._live_profiles.append(profile)
        self._profiles.append(profile)
        try:
            self._apply()
        except BaseException:
            self._profiles.remove(profile)
            self._stop_delayer(profile)
            raise

    def heal(self) -> None:
        """Remove every fault: cuts and lossy profiles (their delayers release what they hold
        and exit)."""
        self._check_open()
        self._cuts.clear()
        stopping, self._profiles = self._profiles, []
        self._apply()
        for profile in stopping:
            self._stop_delayer(profile)

    def check(self) -> None:
        """Raise NetError if a delayer of a current profile has died (its link then passes
        packets undelayed)."""
        for profile in self._profiles:
            if profile.delayer is not None and profile.delayer.poll() is not None:
                raise NetError(
                    f"the delayer of queue {profile.queue} exited with "
                    f"{profile.delayer.returncode}: the link is no longer delayed"
                )

    def delayer_pids(self) -> list[int]:
        """The pids of the current profiles' delayers (processes in the switch namespace)."""
        return [p.delayer.pid for p in self._profiles if p.delayer is not None]

    def queue_stats(self) -> dict[int, dict[str, int]]:
        """The kernel's counters of each bound queue of the switch namespace
        (/proc/net/netfilter/nfnetlink_queue): ``held`` (waiting for a verdict now),
        ``dropped`` (arrived at a full queue: over ``max_held``), ``user_dropped`` (could not
        be sent to the delayer) and ``queued`` (packets queued so far)."""
        out = _run(
            ["ip", "netns", "exec", self.switch_ns, "cat", "/proc/net/netfilter/nfnetlink_queue"]
        )
        stats = {}
        for line in out.splitlines():
            f = [int(x) for x in line.split()]
            stats[f[0]] = {"held": f[2], "dropped": f[5], "user_dropped": f[6], "queued": f[7]}
        return stats

    # --- rules ------------------------------------------------------------------------------
    def _rules(self) -> str:
        lines = [
            "*filter",
            ":INPUT ACCEPT [0:0]",
            ":FORWARD ACCEPT [0:0]",
            ":OUTPUT ACCEPT [0:0]",
            ":HR-CUT - [0:0]",
            ":HR-LOSSY - [0:0]",
        ]
        body = ["-A FORWARD -j HR-CUT", "-A FORWARD -j HR-LOSSY"]
        for pair in sorted(sorted(p) for p in self._cuts):
            x, y = (self.hosts[n].port for n in pair)
            for src, dst in ((x, y), (y, x)):
                body.append(f"-A HR-CUT -m physdev --physdev-in {src} --physdev-out {dst} -j DROP")
        for n, profile in enumerate(self._profiles):
            chain = f"HR-L{n}"
            lines.append(f":{chain} - [0:0]")
            if profile.hosts is None:
                body.append(f"-A HR-LOSSY -j {chain}")
            else:
                for name in profile.hosts:
                    port = self.hosts[name].port
                    body.append(f"-A HR-LOSSY -m physdev --physdev-in {port} -j {chain}")
                    body.append(f"-A HR-LOSSY -m physdev --physdev-out {port} -j {chain}")
            if profile.loss > 0:
                body.append(
                    f"-A {chain} -m statistic --mode random "
                    f"--probability {profile.loss:.6f} -j DROP"
                )
            if profile.queue is not None:
                body.append(f"-A {chain} -j NFQUEUE --queue-num {profile.queue} --queue-bypass")
            else:
                body.append(f"-A {chain} -j ACCEPT")  # no second profile for this packet
        return "\n".join([*lines, *body, "COMMIT", ""])

    def _apply(self) -> None:
        _run(
            ["ip", "netns", "exec", self.switch_ns, "iptables-restore", "-w", "10"],
            input=self._rules(),
        )

    def rules(self) -> str:
        """The switch's current iptables filter table, as iptables-save prints it."""
        return _run(["ip", "netns", "exec", self.switch_ns, "iptables-save", "-t", "filter"])

    # --- delayers ---------------------------------------------------------------------------
    def _start_delayer(
        self, queue: int, delay_ms: float, jitter_ms: float, max_held: int, seed: int | None
    ) -> subprocess.Popen[str]:
        options: dict[str, float | None] = {"queue": queue, "delay-ms": delay_ms}
        options["jitter-ms"] = jitter_ms
        options.update({"max-held": max_held, "owner-pid": os.getpid(), "seed": seed})
        argv = [sys.executable, str(DELAYER)]
        for option, value in options.items():
            if value is not None:
                argv += [f"--{option}", str(value)]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.switch_ns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C goes to the owner, which stops it
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            raise NetError(f"delayer of queue {queue} did not start: {line.strip()} {err.strip()}")
        return proc

    def _stop_delayer(self, profile: _Profile) -> None:
        proc = profile.delayer
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = out.strip().splitlines()
        stats: dict = {"queue": profile.queue, "returncode": proc.returncode}
        if lines and lines[-1].startswith("{"):
            stats.update(json.loads(lines[-1]))
        if err.strip():
            stats["stderr"] = err.strip()
        self.delayer_stats.append(stats)
        if profile in self._live_profiles:
            self._live_profiles.remove(profile)

    # --- life -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise NetError(f"network {self.id} is closed")

    def close(self) -> None:
        """Stop the delayers, kill every process left in the namespaces, delete them (the
        veths and the bridge go with them). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for profile in list(self._live_profiles):
            try:
                self._stop_delayer(profile)
            except Exception:  # the finalizer below kills what is left
                pass
        self._finalizer()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Network({self.id}, hosts={list(self.hosts)})"
