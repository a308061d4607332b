"""What every Python scenario program shares: the command line, the result line, test data.

A scenario program is called as ``PROGRAM BOOTSTRAP SCENARIO PREFIX`` and ends with one line::

    RESULT pass
    RESULT n/a <why the client cannot do this>
    RESULT fail <reason>

``PREFIX`` is unique per run and scenario; programs name their topics, groups and
transactional ids with it so that scenarios never see each other's data. The runner
(``compat/runner.py``) reads the last ``RESULT`` line; a program that dies or hangs without one
is a failure too, with the tail of its output as the reason. A ``SCENARIO`` the program
does not know is a failure (``RESULT fail unknown scenario ...``), never n/a: n/a is only what
a known scenario declares it cannot do (``NotApplicable``). Programs in other languages
(Java, Go, JavaScript) follow the same convention.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Callable

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
STANDARD_SCENARIOS = tuple(f"produce-{c}" for c in COMPRESSIONS) + (
    "idempotent", "group", "admin", "alter-configs", "transactions")

# against a broker with a listener of each security protocol (compat/broker.py, SecureBroker):
# records produced and read back over each, and a wrong SCRAM password refused
SECURITY_SCENARIOS = ("security-ssl", "security-mtls", "security-sasl-ssl-scram-sha-512",
                      "security-sasl-plaintext-plain", "security-wrong-password")

WAIT_S = 30.0  # how long any single wait inside a scenario may take


class NotApplicable(Exception):
    """The client has no way to do this (reported as n/a, not as a failure)."""


class ScenarioFailed(AssertionError):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise ScenarioFailed(what)


def records(n: int, partitions: int) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """``n`` records (partition, key, value, headers); partitions are filled round robin."""
    return [(i % partitions, f"k{i}".encode(), f"value-{i}-".encode() * 8,
             [("seq", str(i).encode()), ("src", b"compat")]) for i in range(n)]


def check_records(sent, got) -> None:
    """``got`` must hold exactly ``sent`` (partition, key, value, headers), each partition's
    records in the order they were sent."""
    want: dict[int, list] = {}
    for p, k, v, h in sent:
        want.setdefault(p, []).append((k, v, [(a, bytes(b)) for a, b in h]))
    have: dict[int, list] = {}
    for p, k, v, h in got:
        have.setdefault(p, []).append((k, v, [(a, bytes(b)) for a, b in (h or [])]))
    for p in sorted(set(want) | set(have)):
        w, g = want.get(p, []), have.get(p, [])
        expect(len(w) == len(g), f"partition {p}: sent {len(w)} records, read {len(g)}")
        for i, (a, b) in enumerate(zip(w, g)):
            expect(a == b, f"partition {p} record {i}: sent {a!r:.120}, read {b!r:.120}")


# The transactions scenario: a committed transaction of COMMITTED, an aborted one of ABORTED,
# then a committed one of LAST; a read_committed consumer must read COMMITTED + [LAST].
COMMITTED = [f"committed-{i}".encode() for i in range(10)]
ABORTED = [f"aborted-{i}".encode() for i in range(5)]
LAST = b"committed-last"


def check_read_committed(got) -> None:
    """``got`` (partition, key, value, headers) holds the committed values only, in order."""
    values = [v for _, _, v, _ in got]
    expect(values == COMMITTED + [LAST], f"read_committed consumer read {values}")


def standard_scenarios(produce_consume: Callable[[str], Callable[[str, str], None]],
                       **named: Callable[[str, str], None]) -> dict:
    """The ``STANDARD_SCENARIOS`` table: ``produce_consume(compression)`` for each produce-*
    scenario, the others by name (``alter_configs`` for "alter-configs")."""
    scenarios = {f"produce-{c}": produce_consume(c) for c in COMPRESSIONS}
    scenarios.update({name.replace("_", "-"): fn for name, fn in named.items()})
    missing = set(STANDARD_SCENARIOS) - set(scenarios)
    assert not missing, f"scenarios without a function: {sorted(missing)}"
    return scenarios


def security() -> dict[str, str]:
    """What a security scenario needs of the broker (compat/broker.py, SecureBroker): the
    address of each listener (``plaintext``, ``ssl``, ``mtls``, ``sasl_ssl``,
    ``sasl_plaintext``), the PEM files (``ca.pem``, ``client.cert.pem``, ``client.key.pem``,
    ``client.keystore.pem``) and the users (``scram.username``, ``plain.password``...), read
    from the properties file the environment variable ``HEADRACE_COMPAT_SECURITY`` names."""
    import os
    path = os.environ.get("HEADRACE_COMPAT_SECURITY")
    if not path:
        raise ScenarioFailed("HEADRACE_COMPAT_SECURITY is not set: not run against the "
                             "suite's secure broker")
    out = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                out[key] = value
    return out



def librdkafka_security(listener: str) -> dict[str, str]:
    """librdkafka's settings for one listener of the suite's secure broker (``security()``),
    without the address."""
    sec = security()
    conf = {}
    if listener in ("ssl", "mtls", "sasl_ssl"):
        conf["ssl.ca.location"] = sec["ca.pem"]
    if listener in ("ssl", "mtls"):
        conf["security.protocol"] = "SSL"
    if listener == "mtls":
        conf.update({"ssl.certificate.location": sec["client.cert.pem"],
                     "ssl.key.location": sec["client.key.pem"]})
    elif listener == "sasl_ssl":
        conf.update({"security.protocol": "SASL_SSL", "sasl.mechanism": sec["scram.mechanism"],
                     "sasl.username": sec["scram.username"],
                     "sasl.password": sec["scram.password"]})
    elif listener == "sasl_plaintext":
        conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": sec["plain.username"],
                     "sasl.password": sec["plain.password"]})
    return conf

def wait_until(cond: Callable[[], bool], what: str, timeout: float = WAIT_S,
               step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:600]


def main(scenarios: dict[str, Callable[[str, str], None]],
         argv: list[str] | None = None) -> int:
    """Run one scenario from the command line and print its RESULT line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 1 and args[0] == "--list":
        print(" ".join(scenarios))
        return 0
    if len(args) != 3:
        print("usage: PROGRAM BOOTSTRAP SCENARIO PREFIX | --list", file=sys.stderr)
        return 2
    bootstrap, name, prefix = args
    fn = scenarios.get(name)
    if fn is None:  # a typo or a scenario not written yet: a failure, never n/a
        print(f"RESULT fail unknown scenario {name} (known: {' '.join(scenarios)})", flush=True)
        return 1
    try:
        fn(bootstrap, prefix)
    except NotApplicable as exc:
        print(f"RESULT n/a {exc}", flush=True)
        return 0
    except BaseException as exc:  # every failure becomes a reason in the matrix
        traceback.print_exc()
        print(f"RESULT fail {one_line(exc)}", flush=True)
        return 1
    print("RESULT pass", flush=True)
    return 0
