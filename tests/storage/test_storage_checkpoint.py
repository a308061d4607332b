"""The data directory's offsets checkpoint (one file for every log): clean opens, crashes,
torn and missing files, the upgrade from one file per partition, removed partitions."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from headrace.storage import Log, LogConfig, OffsetCheckpoints
from headrace.storage.checkpoint import parse
from storage_batches import Writer
from test_storage_log import read_all

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)
FILE = "partition-offsets-checkpoint"
LEGACY = "log-offsets-checkpoint"


def fresh(data_dir):
    """The table as a new process sees it: read from the file."""
    return OffsetCheckpoints(data_dir)


def open_log(data_dir, name, table, recover=False):
    return Log.open(data_dir / name, CFG, recover=recover, checkpoints=table)


def build(data_dir, names, n=40):
    """Logs written and closed cleanly under one table; their batches by name."""
    table = fresh(data_dir)
    written = {}
    with table.deferred():
        for i, name in enumerate(names):
            log = open_log(data_dir, name, table)
            w = Writer(log, seed=i)
            w.append_many(n + i)
            log.close()
            written[name] = w.batches
    return written


def entries(data_dir):
    return parse((data_dir / FILE).read_text())


def test_one_file_for_every_log_and_clean_opens(tmp_path):
    names = [f"t-{i}" for i in range(5)]
    written = build(tmp_path, names)
    assert set(entries(tmp_path)) == set(names)
    for name in names:
        assert not (tmp_path / name / LEGACY).exists()
    table = fresh(tmp_path)
    for name in names:
        log = open_log(tmp_path, name, table)
        try:
            assert log.opened_clean
            assert read_all(log) == written[name]
        finally:
            log.close()


def test_deferred_writes_once_at_the_end(tmp_path):
    table = fresh(tmp_path)
    with table.deferred():
        for i in range(3):
            log = open_log(tmp_path, f"t-{i}", table)
            Writer(log, seed=i).append_many(10)
            log.close()
            assert not (tmp_path / FILE).exists()  # held until the block ends
    assert len(entries(tmp_path)) == 3


def test_crash_after_a_clean_open_reads_only_what_changed(tmp_path):
    """After kill -9, a log untouched since its clean close opens without a check; one
    written since is recovered from its recovery point and keeps every flushed batch."""
    written = build(tmp_path, ["idle-0", "busy-0"])
    table = fresh(tmp_path)
    idle = open_log(tmp_path, "idle-0", table)
    busy = open_log(tmp_path, "busy-0", table)
    w = Writer(busy, seed=99)
    w.batches = list(written["busy-0"])
    w.append_many(30)
    busy.flush()
    for log in (idle, busy):  # kill -9: nothing closed, the table not written again
        for seg in log._segments:
            seg.close()
    table = fresh(tmp_path)
    idle = open_log(tmp_path, "idle-0", table, recover=True)
    busy = open_log(tmp_path, "busy-0", table, recover=True)
    try:
        assert idle.opened_clean and not busy.opened_clean
        assert read_all(idle) == written["idle-0"]
        assert read_all(busy) == w.batches
    finally:
        idle.close()
        busy.close()


def test_torn_temp_file_is_ignored(tmp_path):
    written = build(tmp_path, ["t-0"])
    (tmp_path / (FILE + ".tmp")).write_bytes(b"0\n7\nt-0 99")  # a write cut by a crash
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table)
    try:
        assert log.opened_clean and read_all(log) == written["t-0"]
        Writer(log, seed=5).append()
    finally:
        log.close()
    assert not (tmp_path / (FILE + ".tmp")).exists()
    assert set(entries(tmp_path)) == {"t-0"}


def test_missing_or_garbage_file_means_check_everything(tmp_path):
    written = build(tmp_path, ["t-0", "t-1"])
    os.unlink(tmp_path / FILE)
    last = max((tmp_path / "t-1").glob("*.log"))
    with open(last, "ab") as f:
        f.write(b"\x00" * 30)  # a torn tail
    table = fresh(tmp_path)
    for name in ("t-0", "t-1"):
        log = open_log(tmp_path, name, table)  # no clean-close entry: recovered anyway
        try:
            assert not log.opened_clean and read_all(log) == written[name]
        finally:
            log.close()
    (tmp_path / FILE).write_bytes(b"\xffgarbage\n")
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table)
    try:
        assert not log.opened_clean and read_all(log) == written["t-0"]
    finally:
        log.close()


def test_a_crash_at_any_moment_leaves_a_whole_table(tmp_path):
    """kill -9 of a process rewriting a table of many entries: the file always parses and
    holds one complete version of it."""
    script = textwrap.dedent(f"""
        from headrace.storage import OffsetCheckpoints
        from headrace.storage.checkpoint import Checkpoint
        table = OffsetCheckpoints({str(tmp_path)!r})
        i = 0
        while True:
            for p in range(3000):
                table.set(f"t-{{p}}", Checkpoint(i, i))
            table.write()
            i += 1
    """)
    for delay in (0.3, 0.55, 0.8):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not (tmp_path / FILE).exists():
            continue
        found = entries(tmp_path)
        assert len(found) == 3000
        assert len({(cp.recovery_point, cp.log_start_offset) for cp in found.values()}) == 1


def write_legacy(directory, cp):
    lines = ["version 0", f"recovery_point {cp.recovery_point}"]
    lines.append(f"log_start_offset {cp.log_start_offset}")
    if cp.end_offset is not None:
        lines += [
            f"end_offset {cp.end_offset}",
            f"end_segment {cp.end_segment}",
            f"end_size {cp.end_size}",
        ]
    (directory / LEGACY).write_text("\n".join(lines) + "\n")


def test_upgrade_from_one_file_per_partition(tmp_path):
    """A data directory of an earlier version: each partition's own checkpoint is read (a
    clean open, the log start offset kept), then replaced by the data directory's file."""
    written = build(tmp_path, ["t-0", "t-1"])
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table)
    log.delete_records_before(7)
    log.close()
    old = entries(tmp_path)
    for name, cp in old.items():
        write_legacy(tmp_path / name, cp)
    os.unlink(tmp_path / FILE)

    table = fresh(tmp_path)
    logs = [open_log(tmp_path, name, table) for name in ("t-0", "t-1")]
    try:
        assert all(log.opened_clean for log in logs)
        assert logs[0].log_start_offset == 7
        assert read_all(logs[1]) == written["t-1"]
    finally:
        with table.deferred():
            for log in logs:
                log.close()
    assert entries(tmp_path) == old
    assert not any((tmp_path / name / LEGACY).exists() for name in old)


def test_upgrade_after_a_crash_keeps_the_recovery_point(tmp_path):
    written = build(tmp_path, ["t-0"])
    cp = entries(tmp_path)["t-0"]
    write_legacy(tmp_path / "t-0", cp.__class__(cp.recovery_point, cp.log_start_offset))
    os.unlink(tmp_path / FILE)
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table, recover=True)
    try:
        assert not log.opened_clean and log.recovery_point == cp.recovery_point
        assert read_all(log) == written["t-0"]
    finally:
        log.close()
    assert entries(tmp_path)["t-0"].end_offset == cp.end_offset
    assert not (tmp_path / "t-0" / LEGACY).exists()


def test_entry_of_a_removed_partition_is_not_applied_to_a_new_one(tmp_path):
    """A partition directory removed without its log (deleted while the broker was down, or
    before its entry was written): a new log of that name starts empty at offset 0."""
    build(tmp_path, ["t-0", "t-1"])
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table)
    log.delete_records_before(12)
    log.close()
    assert entries(tmp_path)["t-0"].log_start_offset == 12
    for path in (tmp_path / "t-0").iterdir():
        path.unlink()
    (tmp_path / "t-0").rmdir()

    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table, recover=True)
    try:
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        table.write()  # what the broker does before it lists a new partition
        cp = entries(tmp_path)["t-0"]  # the stale entry is replaced at once
        assert (cp.log_start_offset, cp.end_offset) == (0, None)
        Writer(log, seed=3).append_many(5)
    finally:
        log.close()
    assert entries(tmp_path)["t-0"].log_start_offset == 0


def test_deleted_log_drops_its_entry(tmp_path):
    build(tmp_path, ["t-0", "t-1"])
    table = fresh(tmp_path)
    log = open_log(tmp_path, "t-0", table)
    log.delete()
    table.write()
    assert set(entries(tmp_path)) == {"t-1"}
    assert not (tmp_path / "t-0").exists()


def test_clean_open_opens_no_file_until_the_first_write(tmp_path, monkeypatch):
    """A clean open lists the directory and stats the segments; the active segment's
    indexes are loaded at the first append, and retention still sees its timestamps."""
    import dataclasses

    written = build(tmp_path, ["t-0"], n=100)
    config = dataclasses.replace(CFG, retention_ms=60_000)  # the batches are from 1970
    opened = []
    real_open = os.open

    def recording_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    table = fresh(tmp_path)
    table.get("t-0")  # the data directory's table: one file for every log
    monkeypatch.setattr(os, "open", recording_open)
    log = Log.open(tmp_path / "t-0", config, recover=False, checkpoints=table)
    monkeypatch.undo()
    try:
        assert log.opened_clean and opened == []
        assert log.active_segment_expired()
        w = Writer(log, seed=77)
        w.batches = list(written["t-0"])
        w.append_many(40)
        assert read_all(log) == w.batches
    finally:
        log.close()
    log = open_log(tmp_path, "t-0", fresh(tmp_path))
    try:
        assert log.opened_clean and read_all(log) == w.batches
    finally:
        log.close()
