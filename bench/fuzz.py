"""Hostile input against the decoder and a live broker (``python -m bench.fuzz --minutes 10``).

How this works: hypothesis builds a valid request for every (API key, version) the broker
serves (the ApiVersions table, ``headrace.broker.apis.registry.APIS``), encodes it, then applies up
to a few mutations: a bit flip, a byte set to 0x00/0x7F/0x80/0xFF, a truncation, bytes
inserted or appended, a huge length prefix (2^31-1, 2^15-1, a 5-byte varint of 2^32-1)
or a negative count (-1, -2, -2^31) written over the bytes at some position.

- The decoder check (``check_decode``): ``decode_request`` either succeeds or raises
  ``DecodeError`` (anything else fails the run), and tracemalloc's peak during the decode stays
  within ``alloc_limit(len(input))``: a length prefix of 2^31 must not allocate 2 GiB.
- The broker check (``BrokerFuzz``): the same inputs, framed with a header (and sometimes a
  hostile size prefix), go over real sockets to a ``BrokerProcess`` with a PLAINTEXT, a
  SASL_PLAINTEXT (PLAIN, SCRAM) and a SASL_SSL (SCRAM) listener: on PLAINTEXT, on
  SASL_PLAINTEXT before authentication and after a successful PLAIN authentication, over TLS
  on SASL_SSL before authentication and after a successful SCRAM-SHA-512 authentication, and
  in plain bytes at the TLS listener (no handshake). Some connections instead run a SCRAM
  exchange (SHA-256 or SHA-512, over TLS or not) whose client-first and/or client-final
  message is mutated the same way, or replaced by drawn bytes. Every few inputs and at the end a
  fresh connection must get an ApiVersions answer; the broker must log no handler failure
  (UNKNOWN_SERVER_ERROR) and its RSS must stay within a bound; the caller then checks a real
  client still produces and fetches.

The short runs in the test suite (tests/protocol/test_fuzz_decoder.py,
tests/broker/test_fuzz_broker.py) are derandomized; the long run draws a new seed per batch
and prints the number of inputs tried and every failure with its seed.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import ssl
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from scramp import ScramClient, ScramException

from headrace.broker.client.blocking import BlockingConnection
from headrace.protocol import (
    ApiKey,
    DecodeError,
    decode_request,
    encode_request,
    messages,
    request_class,
)
from headrace.protocol.client import request_frame
from headrace.protocol.schema import FieldSpec, StructSpec


def served() -> list[tuple[int, int]]:
    """(api key, version) for every request version the broker accepts."""
    from headrace.broker.apis.registry import APIS

    return [
        (k, v)
        for k, (_, lowest, highest) in sorted(APIS.items())
        for v in range(lowest, highest + 1)
    ]


# valid messages ------------------------------------------------------------------------------

_INT = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _scalar(t: str) -> st.SearchStrategy:
    if t in _INT:
        lo, hi = _INT[t]
        return st.one_of(st.sampled_from([lo, hi, 0, 1, -1 if lo else 2]), st.integers(lo, hi))
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=40)
    if t == "uuid":
        return st.uuids()
    raise AssertionError(t)


def _value(f: FieldSpec, version: int, depth: int) -> st.SearchStrategy:
    if f.struct is not None:
        one = _struct(f.struct, version, depth + 1)
    else:
        one = _scalar(f.type)
    if f.is_array:
        one = st.lists(one, max_size=3 if depth < 2 else 1)
    if version in f.nullable:
        one = st.one_of(st.none(), one)
    return one


def _struct(spec: StructSpec, version: int, depth: int = 0) -> st.SearchStrategy:
    fields = {f.attr: _value(f, version, depth) for f in spec.fields if version in f.versions}
    return st.builds(spec.cls, **fields)


_requests: dict[tuple[int, int], st.SearchStrategy] = {}


def request(api_key: int, version: int) -> st.SearchStrategy:
    """Valid request bodies (encoded) of ``api_key`` at ``version``."""
    key = (api_key, version)
    if key not in _requests:
        msgs = _struct(request_class(api_key)._spec.root, version)
        _requests[key] = msgs.map(lambda m: encode_request(api_key, version, m))
    return _requests[key]


# mutations -----------------------------------------------------------------------------------

HUGE = [b"\x7f\xff\xff\xff", b"\x7f\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"]
NEGATIVE = [b"\xff\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00", b"\xff\xfe"]
_pos = st.integers(0, 1 << 16)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), _pos, st.integers(0, 7)),
    st.tuples(st.just("set"), _pos, st.sampled_from([0x00, 0x7F, 0x80, 0xFF])),
    st.tuples(st.just("truncate"), _pos),
    st.tuples(st.just("insert"), _pos, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=32)),
    st.tuples(st.just("overwrite"), _pos, st.sampled_from(HUGE + NEGATIVE)),
)


def mutate(data: bytes, mutations: list[tuple]) -> bytes:
    out = bytearray(data)
    for m in mutations:
        op = m[0]
        if op == "extend":
            out += m[1]
            continue
        if op == "truncate":
            del out[m[1] % (len(out) + 1) :]
            continue
        if not out:
            continue
        i = m[1] % len(out)
        if op == "flip":
            out[i] ^= 1 << m[2]
        elif op == "set":
            out[i] = m[2]
        elif op == "insert":
            out[i:i] = m[2]
        else:
            out[i : i + len(m[2])] = m[2]
    return bytes(out)


def random_mutations(rnd) -> list[tuple]:
    """1-4 mutations from ``rnd`` (a ``random.Random``): more mutants per generated message."""
    out: list[tuple] = []
    for _ in range(rnd.randint(1, 4)):
        op, pos = (
            rnd.choice(["flip", "set", "truncate", "insert", "extend", "overwrite"]),
            rnd.getrandbits(16),
        )
        if op == "flip":
            out.append((op, pos, rnd.randrange(8)))
        elif op == "set":
            out.append((op, pos, rnd.choice([0x00, 0x7F, 0x80, 0xFF, rnd.randrange(256)])))
        elif op == "truncate":
            out.append((op, pos))
        elif op == "insert":
            out.append((op, pos, rnd.randbytes(rnd.randint(1, 8))))
        elif op == "extend":
            out.append((op, rnd.randbytes(rnd.randint(1, 32))))
        else:
            out.append((op, pos, rnd.choice(HUGE + NEGATIVE)))
    return out


@st.composite
def valid_request(draw, cases: list[tuple[int, int]]):
    """(api key, version, body): a valid body of one of ``cases``."""
    api_key, version = draw(st.sampled_from(cases))
    return api_key, version, draw(request(api_key, version))


@st.composite
def hostile_request(draw, cases: list[tuple[int, int]]):
    """(api key, version, body): a valid body with 0-4 mutations."""
    api_key, version, body = draw(valid_request(cases))
    return api_key, version, mutate(body, draw(st.lists(MUTATION, max_size=4)))


# the decoder ---------------------------------------------------------------------------------


def alloc_limit(n: int) -> int:
    """Most bytes a decode of ``n`` input bytes may allocate at its peak: objects for what the
    input holds (a byte of input can be an element of an array), never what it claims."""
    return 256 * 1024 + 2048 * n


class Counter:
    def __init__(self) -> None:
        self.n = 0


def check_decode(api_key: int, version: int, data: bytes) -> None:
    """Decode ``data``: success or DecodeError, within ``alloc_limit`` (tracemalloc must be on)."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        decode_request(api_key, version, data)
    except DecodeError:
        pass
    peak = tracemalloc.get_traced_memory()[1] - base
    limit = alloc_limit(len(data))
    assert peak <= limit, (
        f"{ApiKey(api_key).name} v{version}: {len(data)} bytes peaked at {peak}: {data.hex()}"
    )


_SETTINGS = dict(
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.generate, Phase.shrink],
)


MUTANTS = 15  # mutants of each generated message beyond hypothesis' own


def decoder_property(counter: Counter, examples: int, derandomize: bool):
    """A hypothesis test: ``examples`` generated requests over every served version, each
    decoded as hypothesis mutated it and in ``MUTANTS`` more mutants."""
    cases = served()

    @settings(max_examples=examples, derandomize=derandomize, **_SETTINGS)
    @given(valid_request(cases), st.lists(MUTATION, max_size=4), st.randoms(use_true_random=False))
    def decode_hostile(case, mutations, rnd):
        api_key, version, body = case
        counter.n += 1
        check_decode(api_key, version, mutate(body, mutations))
        for _ in range(MUTANTS):
            counter.n += 1
            check_decode(api_key, version, mutate(body, random_mutations(rnd)))

    return decode_hostile


def warm_up() -> None:
    """Compile every served version's decoder, so that compiling is not counted as decoding."""
    for api_key, version in served():
        try:
            decode_request(api_key, version, b"")
        except DecodeError:
            pass


def run_decoder(
    counter: Counter, examples: int, derandomize: bool = True, seed_: int | None = None
):
    warm_up()
    prop = decoder_property(counter, examples, derandomize)
    if seed_ is not None:
        prop = seed(seed_)(prop)
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        prop()
    finally:
        if started:
            tracemalloc.stop()


# the broker ----------------------------------------------------------------------------------

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret" user_fuzz="fuzz-secret";'
)
BROKER_SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
}
SCRAM_USER, SCRAM_PASSWORD = "fuzz", "fuzz-secret"


def broker_settings(directory: Path) -> tuple[dict, Path]:
    """``BROKER_SETTINGS`` with a certificate made in ``directory`` for the SASL_SSL listener;
    and the CA file that vouches for it."""
    from bench.tls import make_pki

    pki = make_pki(directory)
    return {**BROKER_SETTINGS, "ssl.keystore.location": str(pki.broker)}, pki.ca


FAILED = "answering UNKNOWN_SERVER_ERROR"
RSS_GROWTH_LIMIT = 128 << 20


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A request frame around ``body``: bytes of a request, or a mutation of them."""
    return request_frame(api_key, version, correlation_id, "fuzz", body)


def _call(sock: socket.socket, api_key: int, version: int, msg) -> bytes | bytearray:
    """The raw response frame (correlation id first) of ``msg`` sent on ``sock``."""
    conn = BlockingConnection(sock, client_id="fuzz")
    conn.send(api_key, version, msg, raw=True)
    return conn.receive().frame


def authenticate(sock: socket.socket) -> None:
    """PLAIN as user ``fuzz`` over a fresh SASL_PLAINTEXT connection."""
    _call(sock, ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))
    token = b"\0fuzz\0fuzz-secret"
    resp = _call(
        sock, ApiKey.SASL_AUTHENTICATE, 2, messages.SaslAuthenticateRequest(auth_bytes=token)
    )
    assert resp[4:7] == b"\x00\x00\x00", "PLAIN authentication failed"  # tags byte, error 0


def _sasl_authenticate(sock: socket.socket, token: bytes):
    """SaslAuthenticate v2 with ``token``: the decoded answer."""
    request = messages.SaslAuthenticateRequest(auth_bytes=token)
    return BlockingConnection(sock, client_id="fuzz").request(ApiKey.SASL_AUTHENTICATE, 2, request)


def scram_exchange(
    sock: socket.socket, mechanism: str, first: list | bytes | None, final: list | bytes | None
) -> bool:
    """SCRAM as ``SCRAM_USER``, with the client-first and client-final messages mutated by
    the mutation lists given (or replaced by bytes given; None: as the client makes them).
    Whether the broker accepted it."""
    _call(sock, ApiKey.SASL_HANDSHAKE, 1, messages.SaslHandshakeRequest(mechanism=mechanism))
    client = ScramClient([mechanism], SCRAM_USER, SCRAM_PASSWORD)

    def hostile(message: str, how) -> bytes:
        data = message.encode()
        return how if isinstance(how, bytes) else mutate(data, how) if how else data

    answer = _sasl_authenticate(sock, hostile(client.get_client_first(), first))
    if answer.error_code:
        return False
    try:
        client.set_server_first(bytes(answer.auth_bytes).decode())
        final_message = client.get_client_final()
    except (ScramException, UnicodeDecodeError, ValueError):
        return False
    answer = _sasl_authenticate(sock, hostile(final_message, final))
    return answer.error_code == 0


def add_scram_user(port: int) -> None:
    """``SCRAM_USER`` for both SCRAM mechanisms (AlterUserScramCredentials over PLAINTEXT)."""
    A = messages.AlterUserScramCredentialsRequest
    upserts = []
    for code, name in ((1, "sha256"), (2, "sha512")):
        salt = b"fuzz-salt-of-mechanism-%d" % code
        salted = hashlib.pbkdf2_hmac(name, SCRAM_PASSWORD.encode(), salt, 4096)
        upserts.append(
            A.ScramCredentialUpsertion(
                name=SCRAM_USER, mechanism=code, iterations=4096, salt=salt, salted_password=salted
            )
        )
    with BlockingConnection.connect("127.0.0.1", port, 10, client_id="fuzz") as conn:
        conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, A(deletions=[], upsertions=upserts))


def answers_api_versions(port: int, timeout: float = 10) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        resp = _call(s, ApiKey.API_VERSIONS, 0, messages.ApiVersionsRequest())
        return resp[4:6] == b"\x00\x00"


@st.composite
def hostile_frames(draw, cases):
    """1-3 framed requests; sometimes the frame itself (size prefix included) is mutated."""
    frames = []
    for i in range(draw(st.integers(1, 3))):
        api_key, version, body = draw(hostile_request(cases))
        f = frame(api_key, version, i, body)
        if draw(st.integers(0, 9)) == 0:
            f = mutate(f, draw(st.lists(MUTATION, min_size=1, max_size=3)))
        frames.append(f)
    return b"".join(frames)


class BrokerFuzz:
    """Hostile frames against a running ``BrokerProcess`` started with ``BROKER_SETTINGS``."""

    def __init__(self, broker, ca: Path, wait: float = 0.1) -> None:
        self.broker = broker
        self.plain_port = broker.listener_ports["PLAINTEXT"]
        self.sasl_port = broker.listener_ports["SASL_PLAINTEXT"]
        self.tls_port = broker.listener_ports["SASL_SSL"]
        self.tls = ssl.create_default_context(cafile=str(ca))
        add_scram_user(self.plain_port)
        self.kinds: dict[str, int] = {}  # connections tried, by kind
        self.wait = wait
        self.tried = 0
        self.rss_before = rss(broker.pid)
        self.seen = len(broker.lines)  # log lines checked for handler failures

    def _connect(self, where: str) -> socket.socket:
        port = {
            "plaintext": self.plain_port,
            "sasl": self.sasl_port,
            "authenticated": self.sasl_port,
        }
        raw = socket.create_connection(("127.0.0.1", port.get(where, self.tls_port)), timeout=10)
        if where in ("tls", "tls-authenticated", "scram-tls"):
            return self.tls.wrap_socket(raw, server_hostname="localhost")
        return raw

    def send(self, data: bytes, where: str) -> None:
        with self._connect(where) as s:
            if where == "authenticated":
                authenticate(s)
            elif where == "tls-authenticated":
                assert scram_exchange(s, "SCRAM-SHA-512", None, None), "SCRAM failed"
            try:
                s.sendall(data)
                s.settimeout(self.wait)
                while s.recv(1 << 16):  # whatever comes back until a close or a pause
                    pass
            except (TimeoutError, ConnectionError, ssl.SSLError):
                pass
        self._tried(where)

    def scram(self, mechanism: str, tls: bool, first, final) -> None:
        """A SCRAM exchange with hostile client messages (``scram_exchange``)."""
        with self._connect("scram-tls" if tls else "sasl") as s:
            try:
                scram_exchange(s, mechanism, first, final)
            except (TimeoutError, ConnectionError, ssl.SSLError):
                pass  # closed after a failure, as Kafka does
        self._tried("scram-tls" if tls else "scram")

    def _tried(self, kind: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.tried += 1
        if self.tried % 50 == 0:
            self.check()

    def check(self) -> None:
        assert answers_api_versions(self.plain_port), "ApiVersions not answered"
        lines, self.seen = self.broker.lines[self.seen :], len(self.broker.lines)
        failed = [line for line in lines if FAILED in line]
        assert not failed, f"a handler failed on hostile input: {failed[0]}"
        grown = rss(self.broker.pid) - self.rss_before
        assert grown <= RSS_GROWTH_LIMIT, f"broker RSS grew by {grown >> 20} MiB"

    def property(self, examples: int, derandomize: bool):
        cases = served()
        # where each frame goes, in turn: every kind of connection gets its share however the
        # examples fall (a drawn one could miss a kind in a short run)
        wheres = ["plaintext", "sasl", "authenticated", "tls", "tls-authenticated", "tls-port-plain"]
        frames = [0]
        hostile_message = st.one_of(
            st.none(),
            st.lists(MUTATION, min_size=1, max_size=4),
            st.binary(max_size=300),
        )
        scram = st.tuples(
            st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
            st.booleans(),
            hostile_message,
            hostile_message,
        )

        @settings(max_examples=examples, derandomize=derandomize, **_SETTINGS)
        @given(st.one_of(hostile_frames(cases), scram))
        def broker_hostile(case):
            if isinstance(case, tuple):
                self.scram(*case)
            else:
                frames[0] += 1
                self.send(case, wheres[frames[0] % len(wheres)])

        return broker_hostile


# the long run --------------------------------------------------------------------------------


def well_behaved_client(bootstrap: str) -> None:
    """kafka-python produces 10 records (acks=all) and reads them back."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"well-behaved-{time.monotonic_ns()}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(10):
        producer.send(topic, b"v%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    got = sorted(m.value for m in consumer)
    consumer.close()
    assert got == sorted(b"v%d" % i for i in range(10)), got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10, help="how long to run (default 10)")
    p.add_argument("--target", choices=["decoder", "broker", "both"], default="both")
    p.add_argument("--batch", type=int, default=500, help="inputs per hypothesis run (seed)")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.minutes * 60
    both = args.target == "both"
    decoder_until = time.monotonic() + (args.minutes * 30 if both else args.minutes * 60)
    failures = 0
    counter = Counter()
    n = 0
    if args.target in ("decoder", "both"):
        tracemalloc.start()
        while time.monotonic() < decoder_until:
            n += 1
            try:
                run_decoder(counter, args.batch, derandomize=False, seed_=n)
            except Exception as e:  # noqa: BLE001 - report every failure and go on
                failures += 1
                print(f"decoder FAILURE (seed {n}): {e!r}", flush=True)
        tracemalloc.stop()
        print(f"decoder: {counter.n} inputs tried, {failures} failures", flush=True)
    if args.target in ("broker", "both"):
        from headrace.broker.tools.process import BrokerProcess

        broker_failures = 0
        with tempfile.TemporaryDirectory() as tmp:
            settings_, ca = broker_settings(Path(tmp) / "pki")
            with BrokerProcess(Path(tmp) / "data", settings_, args=["--log-level", "WARNING"]) as b:
                fuzz = BrokerFuzz(b, ca)
                while time.monotonic() < deadline:
                    n += 1
                    try:
                        seed(n)(fuzz.property(args.batch // 5, derandomize=False))()
                    except Exception as e:  # noqa: BLE001
                        broker_failures += 1
                        print(f"broker FAILURE (seed {n}): {e!r}", flush=True)
                        if not b.alive:
                            break
                try:
                    fuzz.check()
                    well_behaved_client(b.bootstrap)
                except Exception as e:  # noqa: BLE001
                    broker_failures += 1
                    print(f"broker FAILURE after the run: {e!r}", flush=True)
                grown = (rss(b.pid) - fuzz.rss_before) >> 20 if b.alive else None
        print(
            f"broker: {fuzz.tried} inputs tried ({fuzz.kinds}), {broker_failures} failures,"
            f" RSS grew {grown} MiB",
            flush=True,
        )
        failures += broker_failures
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
