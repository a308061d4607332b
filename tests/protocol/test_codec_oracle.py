"""Cross-check: kafka-python's own generated codec (an independent implementation built from
the same schemas) must decode our encodings and re-encode them to the same bytes.

Test-only: the codec under test never imports kafka-python's Python code.
"""

import importlib
import pkgutil

import pytest

from headrace.protocol import encode_message
from protocol_testgen import all_message_versions, build_message

kafka_protocol = pytest.importorskip("kafka.protocol")
api_message = pytest.importorskip("kafka.protocol.api_message")


def _their_classes() -> dict:
    for m in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in m.name or "generate_stubs" in m.name:
            continue
        try:
            importlib.import_module(m.name)
        except Exception:  # pragma: no cover - optional modules of theirs
            pass
    out, stack = {}, [api_message.ApiMessage]
    while stack:
        c = stack.pop()
        for s in c.__subclasses__():
            stack.append(s)
            name = s.name if isinstance(s.name, str) else None
            if name:
                out.setdefault(name, s)
    return out


THEIRS = _their_classes()
# (the versions their schemas know: protocol/schemas/ has some newer ones, Kafka 4.4's)
CASES = [(n, v) for n, v in all_message_versions() if n in THEIRS and v <= THEIRS[n].valid_versions[1]]


def test_oracle_covers_most_messages():
    assert len({n for n, _ in CASES}) >= 100


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_independent_codec_agrees(name, version, seed):
    msg = build_message(name, version, seed)
    if name == "ApiVersionsResponse":
        msg.error_code = 0  # clients read any error response in the v0 layout
    ours = b"".join(encode_message(msg, version))
    theirs = THEIRS[name].decode(ours, version=version)
    theirs._header = None
    assert bytes(theirs.encode(version=version)) == ours
