"""bench/faults/net.py with real packets: three hosts in network namespaces on a bridge, TCP
echo servers in each, and partitions, loss and delay checked from inside the hosts.

Needs root, iproute2, iptables (Debian package ``iptables``), bridge netfilter and
nfnetlink_queue: skipped with the reason otherwise. About 20 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.faults import net

ROOT = Path(__file__).resolve().parents[2]


_REASON = net.unavailable_reason(probe=True)
pytestmark = [
    pytest.mark.skipif(_REASON is not None, reason=f"no simulated network here: {_REASON}"),
    pytest.mark.timeout(120),
]

ECHO_PORT = 7000
UDP_PORT = 7001

# One program for every role, run inside a host with host.command([python, HELPER, mode, ...]).
HELPER = textwrap.dedent(
    """
    import json, socket, struct, sys, threading, time

    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "echo-server":  # TCP echo on the port, every address
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", int(args[0])))
        s.listen(64)
        print("ready", flush=True)
        def serve(c):
            with c:
                while data := c.recv(65536):
                    c.sendall(data)
        while True:
            threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
    elif mode == "probe":  # connect and echo one byte: exit 0 if it worked
        host, port, timeout = args[0], int(args[1]), float(args[2])
        try:
            with socket.create_connection((host, port), timeout=timeout) as c:
                c.sendall(b"x")
                sys.exit(0 if c.recv(1) == b"x" else 1)
        except OSError as e:
            print(e)
            sys.exit(1)
    elif mode == "rtt":  # milliseconds of each of n one-byte echoes on one connection
        host, port, n = args[0], int(args[1]), int(args[2])
        with socket.create_connection((host, port), timeout=5) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out = []
            for _ in range(n):
                t = time.perf_counter()
                c.sendall(b"x")
                c.recv(1)
                out.append((time.perf_counter() - t) * 1000)
        print(json.dumps(out))
    elif mode == "udp-send":  # n datagrams, (sequence, send time), one per gap
        host, port, n, gap = args[0], int(args[1]), int(args[2]), float(args[3])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(n):
            s.sendto(struct.pack("!Id", i, time.time()), (host, port))
            time.sleep(gap)
    elif mode == "udp-recv":  # until idle for `idle` s: [(sequence, one-way ms), ...]
        # the arrival time is the kernel's (SO_TIMESTAMPNS), so a receiver scheduled late
        # on a loaded machine does not count
        port, idle = int(args[0]), float(args[1])
        SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python 3.11 lacks it
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.bind(("0.0.0.0", port))
        print("ready", flush=True)
        s.settimeout(10)  # the first datagram
        got = []
        try:
            while True:
                data, ancillary, _, _ = s.recvmsg(64, 64)
                seq, sent = struct.unpack("!Id", data)
                arrived = time.time()
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = struct.unpack("qq", value[:16])
                        arrived = sec + nsec / 1e9
                got.append((seq, (arrived - sent) * 1000))
                s.settimeout(idle)
        except TimeoutError:
            pass
        print(json.dumps(got))
    """
)


def _wait_ready(proc: subprocess.Popen, what: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"{what} did not start: {line!r}"


@pytest.fixture(scope="module")
def helper(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("net") / "helper.py"
    path.write_text(HELPER)
    return str(path)


@pytest.fixture(scope="module")
def lan(helper):
    """A Network with hosts a, b, c, each running a TCP echo server."""
    with net.Network() as network:
        servers = []
        for name in ("a", "b", "c"):
            host = network.add_host(name)
            server = subprocess.Popen(
                host.command([sys.executable, helper, "echo-server", str(ECHO_PORT)]),
                stdout=subprocess.PIPE,
                text=True,
            )
            servers.append(server)
            _wait_ready(server, f"echo server in {name}")
        yield network
    for server in servers:  # close() killed them; reap them
        server.wait(timeout=5)


@pytest.fixture
def healed(lan):
    yield lan
    lan.heal()


def run_in(host, helper, *args, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run(
        host.command([sys.executable, helper, *map(str, args)]),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def reachable(network, helper, pairs, timeout=1.0) -> dict[tuple[str, str], bool]:
    """For each (source, destination) name pair, whether a TCP echo works; all at once."""
    procs = {}
    for src, dst in pairs:
        argv = [sys.executable, helper, "probe", network.host(dst).ip, str(ECHO_PORT), str(timeout)]
        procs[src, dst] = subprocess.Popen(
            network.host(src).command(argv), stdout=subprocess.DEVNULL
        )
    return {pair: proc.wait(timeout=30) == 0 for pair, proc in procs.items()}


ALL_PAIRS = [(x, y) for x in "abc" for y in "abc" if x != y]


def rtts(network, helper, src, dst, n) -> list[float]:
    done = run_in(network.host(src), helper, "rtt", network.host(dst).ip, ECHO_PORT, n)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def udp_one_way(network, helper, src, dst, count, gap_s) -> list[tuple[int, float]]:
    """Send ``count`` datagrams src -> dst; what arrived: (sequence, one-way ms) in order."""
    receiver = subprocess.Popen(
        network.host(dst).command([sys.executable, helper, "udp-recv", str(UDP_PORT), "0.7"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_ready(receiver, "udp receiver")
        sent = run_in(
            network.host(src), helper, "udp-send", network.host(dst).ip, UDP_PORT, count, gap_s
        )
        assert sent.returncode == 0, sent.stderr
        out, _ = receiver.communicate(timeout=20)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    return [tuple(x) for x in json.loads(out)]


# ---------------------------------------------------------------------------------------------


def test_hosts_and_command(lan):
    assert [h.ip for h in lan.hosts.values()] == ["10.211.0.1", "10.211.0.2", "10.211.0.3"]
    a = lan.host("a")
    assert a.command(["true"]) == ["ip", "netns", "exec", a.ns, "true"]
    # `ip netns exec` execs: the Popen's pid becomes the program itself, in the namespace
    proc = subprocess.Popen(a.command(["sleep", "30"]))
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
            if cmdline[0] == b"sleep":
                break
            time.sleep(0.01)
        assert cmdline[:2] == [b"sleep", b"30"]
        ns_inode = os.stat(f"/run/netns/{a.ns}").st_ino
        assert os.readlink(f"/proc/{proc.pid}/ns/net") == f"net:[{ns_inode}]"
        proc.send_signal(signal.SIGTERM)  # reaches sleep itself
        assert proc.wait(timeout=5) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_every_host_reaches_every_other(lan, helper):
    assert reachable(lan, helper, ALL_PAIRS) == dict.fromkeys(ALL_PAIRS, True)


def test_cut_is_both_ways_and_only_between_the_cut_hosts(healed, helper):
    healed.cut("a", "b")
    got = reachable(healed, helper, ALL_PAIRS)
    expected = {pair: set(pair) != {"a", "b"} for pair in ALL_PAIRS}
    assert got == expected
    healed.heal()
    assert reachable(healed, helper, ALL_PAIRS) == dict.fromkeys(ALL_PAIRS, True)


def test_cut_from_several_and_isolate(healed, helper):
    healed.cut(healed.host("a"), [healed.host("b"), "c"])
    got = reachable(healed, helper, ALL_PAIRS)
    assert got == {pair: "a" not in pair for pair in ALL_PAIRS}
    healed.heal()
    healed.isolate("c")
    got = reachable(healed, helper, ALL_PAIRS)
    assert got == {pair: "c" not in pair for pair in ALL_PAIRS}


def test_delay_raises_round_trip(healed, helper):
    before = median(rtts(healed, helper, "a", "c", 10))
    assert before < 10, f"undelayed round trip {before:.2f} ms"
    healed.lossy(loss=0, delay_ms=50, jitter_ms=10, seed=1)
    delayed = rtts(healed, helper, "a", "c", 10)
    # one way each: a round trip is delayed twice, 100 ms +/- 20 ms (and FIFO keeps it >= 80)
    assert 80 <= median(delayed) <= 160, delayed
    assert min(delayed) >= 75, delayed
    print(f"\nround trip a-c: {before:.3f} ms undelayed, {median(delayed):.1f} ms delayed")
    healed.check()
    healed.heal()
    stats = healed.delayer_stats[-1]
    assert stats["returncode"] == 0 and stats["received"] == stats["accepted"] > 0, stats
    assert median(rtts(healed, helper, "a", "c", 10)) < 10


def test_delay_only_on_the_links_of_the_hosts_asked(healed, helper):
    healed.lossy(loss=0, delay_ms=50, hosts=["b"])
    assert median(rtts(healed, helper, "a", "c", 5)) < 10
    assert median(rtts(healed, helper, "b", "c", 5)) >= 90


def test_jitter_keeps_order_on_a_path(healed, helper):
    healed.lossy(loss=0, delay_ms=50, jitter_ms=10, seed=2)
    got = udp_one_way(healed, helper, "a", "c", 300, 0.001)
    seqs = [s for s, _ in got]
    assert seqs == list(range(300)), "lost or reordered"
    delays = [d for _, d in got]
    # each packet 40..60 ms, raised to its predecessor's release at most (FIFO); a loaded
    # machine adds a late tail (a process not scheduled), so the bound is on 90 %
    p90 = sorted(delays)[len(delays) * 9 // 10]
    low, mid, high = min(delays), median(delays), max(delays)
    print(f"\none-way 50+/-10 ms: min {low:.1f} median {mid:.1f} p90 {p90:.1f} max {high:.1f}")
    assert min(delays) >= 39 and p90 <= 75, (min(delays), p90)
    assert 45 <= median(delays) <= 65, median(delays)


def test_loss_drops_about_that_share(healed, helper):
    healed.lossy(loss=0.3)  # no delay: the kernel's statistic match alone, no delayer
    assert healed.delayer_pids() == []
    got = udp_one_way(healed, helper, "a", "c", 1000, 0.0002)
    share = 1 - len(got) / 1000
    print(f"\nloss 0.3: {share:.3f} of 1000 datagrams lost")
    assert 0.22 <= share <= 0.38, share  # binomial sd is 0.0145
    seqs = [s for s, _ in got]
    assert seqs == sorted(seqs)
    healed.heal()
    assert len(udp_one_way(healed, helper, "a", "c", 300, 0.0002)) == 300


def test_delayer_holds_at_most_max_held(healed, helper):
    healed.lossy(loss=0, delay_ms=300, max_held=10)
    got = udp_one_way(healed, helper, "a", "c", 100, 0)  # a burst, all within the delay
    (queue,) = healed.queue_stats().values()
    # tail drop: the first 10 are held and delivered, the kernel drops the rest at the queue
    assert [s for s, _ in got] == list(range(10)), got
    assert queue["dropped"] == 90 and queue["held"] == 0, queue
    healed.heal()
    assert healed.delayer_stats[-1]["max_held"] == 10


def test_dead_delayer_fails_open(healed, helper):
    healed.lossy(loss=0, delay_ms=50)
    (pid,) = healed.delayer_pids()
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    with pytest.raises(net.NetError, match="no longer delayed"):
        healed.check()
    assert median(rtts(healed, helper, "a", "c", 5)) < 10  # --queue-bypass: undelayed
    healed.heal()
    assert healed.delayer_stats[-1]["returncode"] == -signal.SIGKILL


def _net_inodes_in_use(inodes: set[int]) -> list[str]:
    """Processes whose network namespace is one of ``inodes``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                link = os.readlink(entry / "ns" / "net")
            except OSError:
                continue
            if int(link.split("[")[1].rstrip("]")) in inodes:
                found.append(entry.name)
    return found


def test_close_leaves_nothing(helper):
    network = net.Network()
    a, b = network.add_host("a"), network.add_host("b")
    server = subprocess.Popen(
        b.command([sys.executable, helper, "echo-server", str(ECHO_PORT)]),
        stdout=subprocess.PIPE,
        text=True,
    )
    _wait_ready(server, "echo server")
    network.lossy(loss=0.1, delay_ms=20)
    (delayer,) = network.delayer_pids()
    names = [network.switch_ns, a.ns, b.ns]
    inodes = {os.stat(f"/run/netns/{ns}").st_ino for ns in names}
    assert len(_net_inodes_in_use(inodes)) == 2  # the server and the delayer
    network.close()
    network.close()  # idempotent
    assert server.wait(timeout=5) == -signal.SIGKILL  # close() kills what runs in its hosts
    assert not Path(f"/proc/{delayer}").exists()
    assert not [ns for ns in net._namespaces() if ns.startswith(network.id)]
    assert _net_inodes_in_use(inodes) == []
    assert not (net.STATE_DIR / network.id).exists()
    with pytest.raises(net.NetError, match="closed"):
        network.add_host("c")


def test_cleanup_stale_removes_what_a_killed_owner_left(tmp_path):
    # a process makes a Network (with a delayer and a process in a host), then dies by SIGKILL;
    # a prefix of this run's own, so that a run beside it does not clean this one's up
    prefix = f"hrstale{os.getpid()}"
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import importlib.util, os, signal, subprocess, sys
            spec = importlib.util.spec_from_file_location("n", {str(net.__file__)!r})
            n = importlib.util.module_from_spec(spec)
            sys.modules["n"] = n
            spec.loader.exec_module(n)
            network = n.Network(prefix={prefix!r})
            host = network.add_host("h")
            subprocess.Popen(host.command(["sleep", "60"]), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            network.lossy(loss=0, delay_ms=10)
            print(network.id, network.delayer_pids()[0], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == -signal.SIGKILL, done.stderr
    network_id, delayer = done.stdout.split()
    left = [ns for ns in net._namespaces() if ns.startswith(network_id)]
    assert sorted(left) == [f"{network_id}-h", f"{network_id}-sw"]
    # the delayer notices its owner is gone by itself (within 0.5 s)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{delayer}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{delayer}").exists()
    removed = net.cleanup_stale(prefix)
    assert sorted(removed) == sorted(left)
    assert not [ns for ns in net._namespaces() if ns.startswith(network_id)]
    assert not (net.STATE_DIR / network_id).exists()


def test_cleanup_stale_leaves_live_networks_alone(lan):
    removed = net.cleanup_stale()  # may remove a dead run's leftovers, never ours
    assert not [ns for ns in removed if ns.startswith(lan.id)]
    assert {lan.switch_ns, *(h.ns for h in lan.hosts.values())} <= set(net._namespaces())
    assert (net.STATE_DIR / lan.id).exists()
