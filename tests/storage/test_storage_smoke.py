from headrace.storage import Log, LogConfig
from storage_batches import Writer, split_batches


def test_smoke(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, index_interval_bytes=100),
                   recover=False)
    w = Writer(log)
    w.append_many(50)
    got = []
    off = 0
    while off < log.log_end_offset:
        data = log.read(off, 300)
        bs = split_batches(data)
        got += bs
        off = int.from_bytes(bs[-1][:8], "big") + int.from_bytes(bs[-1][23:27], "big") + 1
    assert got == w.batches
    log.close()
    log2 = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, index_interval_bytes=100),
                    recover=False)
    assert log2.log_end_offset == log.log_end_offset
    assert b"".join(split_batches(log2.read(0, 10**9))) == log2.read(0, 10**9)
