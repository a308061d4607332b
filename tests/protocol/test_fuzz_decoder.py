"""The decoder under hostile bytes: every request version the broker serves, built valid by
hypothesis, encoded, then mutated (bit flips, truncations, extensions, huge length prefixes,
negative counts). Decoding succeeds or raises DecodeError, never another exception, and never
allocates more than the input can justify. The long run is ``python -m bench.fuzz``."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import fuzz  # noqa: E402
from headrace.protocol import DecodeError, decode_request  # noqa: E402

EXAMPLES = 300


def test_hostile_requests_decode_or_raise_decode_error_within_bounded_memory():
    counter = fuzz.Counter()
    fuzz.run_decoder(counter, EXAMPLES, derandomize=True)
    print(f"{counter.n} inputs tried")
    assert counter.n >= EXAMPLES * (1 + fuzz.MUTANTS)


@pytest.mark.parametrize("prefix", fuzz.HUGE + fuzz.NEGATIVE)
def test_huge_and_negative_prefixes_everywhere_in_a_metadata_request(prefix):
    """Each prefix written at every offset of a valid request: the exhaustive small case."""
    good = fuzz.encode_request(3, 12, fuzz.messages.MetadataRequest(
        topics=[fuzz.messages.MetadataRequest.MetadataRequestTopic(name="orders")]))
    tracemalloc.start()
    try:
        for i in range(len(good)):
            fuzz.check_decode(3, 12, fuzz.mutate(good, [("overwrite", i, prefix)]))
    finally:
        tracemalloc.stop()


def test_the_memory_check_catches_an_allocation_the_input_cannot_justify():
    """The bound the fuzz run asserts is one a 2^31 allocation would break."""
    assert fuzz.alloc_limit(16) < 1 << 31
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        blob = bytearray(8 << 20)
        assert tracemalloc.get_traced_memory()[1] - base > fuzz.alloc_limit(len(blob) // 4096)
        del blob
    finally:
        tracemalloc.stop()
    with pytest.raises(DecodeError):
        decode_request(3, 0, b"\x7f\xff\xff\xff")
