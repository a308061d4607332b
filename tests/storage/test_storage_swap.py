"""Log.replace_segments, cut at each step: the next open finishes a committed swap (or drops
one that never committed) and the log reads exactly the same records."""

import os

import pytest
from storage_batches import Writer
from test_storage_log import read_all

from headrace.storage import Log, LogConfig, StorageError, swap
from headrace.storage._batch import iter_batches
from headrace.storage.segment import LogSegment

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


def stage_merged(log, old):
    """Stage one segment holding the batches of ``old`` (consecutive segments), unchanged."""
    staged = swap.stage(log.directory)
    out = LogSegment.create(
        staged, old[0].base_offset, log.config.index_interval_bytes, log._files
    )
    fd = out.log_file.acquire()
    for seg in old:
        with open(os.path.join(log.directory, f"{seg.base_offset:020d}.log"), "rb") as f:
            data = f.read()
        os.write(fd, data)
        out.size += len(data)
    out.deactivate()
    out.write_indexes(iter_batches(fd, 0, out.size))
    os.fsync(fd)
    out.log_file.release()
    out.close()
    return staged


def test_replace_segments_swaps_in_place(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=3)
    w.append_many(150)
    before = log.segment_count
    old = log._segments[:2]
    found = log.inactive_segments()
    staged = stage_merged(log, old)
    new = log.replace_segments(old, staged, generation=found.generation,
                               cleaner_offset=found.ends[1])
    assert [s.base_offset for s in new] == [old[0].base_offset]
    assert log.segment_count == before - 1
    assert log.cleaner_offset == found.ends[1]
    assert read_all(log) == w.batches
    log.close()
    reopened = Log.open(tmp_path / "t-0", CFG, recover=False)
    assert read_all(reopened) == w.batches
    assert reopened.segment_count == before - 1
    reopened.close()


def test_replace_segments_refuses_a_changed_log(tmp_path):
    log = Log.open(tmp_path / "t-0", CFG, recover=False)
    w = Writer(log, seed=4)
    w.append_many(150)
    old = log._segments[:2]
    found = log.inactive_segments()
    staged = stage_merged(log, old)
    log.truncate_to(log.log_end_offset - 1)  # a new generation
    assert log.replace_segments(old, staged, generation=found.generation,
                                cleaner_offset=found.ends[1]) is None
    assert not os.path.exists(staged)
    log.close()


# renames made by replace_segments: 1 commits the swap; 2 marks the old files unlinked; the
# rest move the new files in. Crashing at rename N leaves the swap cut just before it.
@pytest.mark.parametrize("crash_at_rename", [1, 2, 3, 4, 5])
def test_swap_cut_midway_is_finished_at_open(tmp_path, monkeypatch, crash_at_rename):
    path = tmp_path / "t-0"
    log = Log.open(path, CFG, recover=False)
    w = Writer(log, seed=5)
    w.append_many(150)
    log.flush()
    before = log.segment_count
    old = log._segments[:3]
    found = log.inactive_segments()
    staged = stage_merged(log, old)

    real_rename = os.rename
    renames = [0]

    def rename(src, dst):
        renames[0] += 1
        if renames[0] == crash_at_rename:
            raise OSError("simulated crash")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(StorageError):
        log.replace_segments(old, staged, generation=found.generation,
                             cleaner_offset=found.ends[2])
    monkeypatch.setattr(os, "rename", real_rename)
    for s in log._segments:  # the process dies
        s.close()

    log2 = Log.open(path, CFG, recover=True)
    assert not (path / "cleaner.swap").exists()
    assert not (path / "cleaner.cleaned").exists()
    committed = crash_at_rename > 1
    assert log2.segment_count == (before - 2 if committed else before)
    assert read_all(log2) == w.batches
    log2.close()
