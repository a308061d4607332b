"""Kafka's record batch compression codecs: gzip (1), snappy (2), lz4 (3), zstd (4).

How this works
--------------
``compress`` and ``decompress`` act on a batch's records section. Codecs other than gzip are
imported on first use: zstandard, lz4.frame, cramjam or python-snappy (Kafka's snappy is
xerial-framed: a 16-byte header, then int32-length-prefixed raw blocks of up to 32 KiB; raw
snappy is accepted on read). LZ4 is the frame format with 64 KiB independent blocks.

Decompression is bounded: output beyond ``limit`` bytes raises ``CorruptRecordError`` before
it is produced, so a small batch that inflates to gigabytes (a compression bomb) is corrupt
input, not an allocation.
"""

from __future__ import annotations

import struct

from headrace.record_format import INT32, CorruptRecordError, read_uvarint

__all__ = [
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "DECOMPRESSED_MAX",
    "UnsupportedCompressionError",
    "available_compressions",
    "compress",
    "decompress",
]

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4


class UnsupportedCompressionError(ValueError):
    """The compression codec is unknown or its module is not installed."""


DECOMPRESSED_MAX = 64 * 1024 * 1024  # the most a batch's records may decompress to
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy_raw():
    try:
        import cramjam

        return (
            lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
            lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
        )
    except ImportError:
        pass
    try:
        import snappy

        return snappy.compress, snappy.decompress
    except ImportError:
        raise UnsupportedCompressionError("snappy needs cramjam or python-snappy") from None


def _snappy_compress(data: bytes) -> bytes:
    compress, _ = _snappy_raw()
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = compress(data[i : i + _XERIAL_BLOCK])
        out += INT32.pack(len(block))
        out += block
    return bytes(out)


def _too_large(limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"records decompress to more than {limit} bytes")


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (a varint at its start)."""
    try:
        return read_uvarint(block, 0)[0]
    except CorruptRecordError:
        raise CorruptRecordError("snappy block without a valid length") from None


def _snappy_decompress(data, limit: int) -> bytes:
    _, decompress = _snappy_raw()
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_length(data) > limit:
            raise _too_large(limit)
        return decompress(data)
    pos, out = 16, bytearray()
    while pos < len(data):
        (n,) = INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("xerial snappy block runs past the data")
        block = data[pos : pos + n]
        if len(out) + _snappy_length(block) > limit:
            raise _too_large(limit)
        out += decompress(block)
        pos += n
    return bytes(out)


def _gzip():
    import gzip
    import zlib

    def decompress(data, limit: int) -> bytes:
        out, rest = bytearray(), bytes(data)
        while rest:  # a stream may hold several gzip members
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += d.decompress(rest, limit + 1 - len(out))
            if len(out) > limit or d.unconsumed_tail:
                raise _too_large(limit)
            if not d.eof:
                raise CorruptRecordError("gzip data ends early")
            rest = d.unused_data
        return bytes(out)

    return (lambda b: gzip.compress(bytes(b))), decompress


def _lz4():
    try:
        import lz4.frame as f
    except ImportError:
        raise UnsupportedCompressionError("lz4 needs the lz4 package") from None

    def decompress(data, limit: int) -> bytes:
        d = f.LZ4FrameDecompressor()
        out = d.decompress(bytes(data), max_length=limit + 1)
        if len(out) > limit or not d.needs_input:
            raise _too_large(limit)
        return out

    return (
        lambda b: f.compress(
            bytes(b),
            block_size=f.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        ),
        decompress,
    )


def _zstd():
    try:
        import zstandard
    except ImportError:
        raise UnsupportedCompressionError("zstd needs the zstandard package") from None

    def decompress(data, limit: int) -> bytes:
        with zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True) as r:
            out = r.read(limit + 1)
        if len(out) > limit:
            raise _too_large(limit)
        return out

    return (lambda b: zstandard.ZstdCompressor().compress(bytes(b))), decompress


_CODEC_LOADERS = {
    COMPRESSION_GZIP: _gzip,
    COMPRESSION_SNAPPY: lambda: (_snappy_compress, _snappy_decompress),
    COMPRESSION_LZ4: _lz4,
    COMPRESSION_ZSTD: _zstd,
}
_codecs: dict = {}


def _codec(compression: int):
    c = _codecs.get(compression)
    if c is None:
        loader = _CODEC_LOADERS.get(compression)
        if loader is None:
            raise UnsupportedCompressionError(f"unknown compression type {compression}")
        if compression == COMPRESSION_SNAPPY:
            _snappy_raw()  # fail early when no module is installed
        c = _codecs[compression] = loader()
    return c


def compress(compression: int, data: bytes) -> bytes:
    """Compress a batch's records section with Kafka's codec ``compression`` (1-4)."""
    return _codec(compression)[0](data)


def decompress(compression: int, data, limit: int = DECOMPRESSED_MAX) -> bytes:
    """The records section of a batch compressed with codec ``compression`` (1-4).

    Output beyond ``limit`` bytes raises CorruptRecordError before it is produced, so a small
    batch that inflates to gigabytes (a compression bomb) costs no more than ``limit``.
    """
    return _codec(compression)[1](data, limit)


def available_compressions() -> list[int]:
    """Compression types whose modules are importable here (none and gzip always)."""
    out = [COMPRESSION_NONE]
    for c in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        try:
            _codec(c)
        except UnsupportedCompressionError:
            continue
        out.append(c)
    return out
