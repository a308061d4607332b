"""``replace_file``: a small file replaced whole, never half-written, as every checkpoint, the
topic table and the broker's documents are written."""

import os
import stat

import pytest

from headrace.storage import replace_file


def test_replaces_the_contents_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(b"old contents, longer than the new ones\n")
    replace_file(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_creates_the_file_with_the_mode_asked_for(tmp_path):
    old = os.umask(0)
    try:
        replace_file(tmp_path / "secret", b"x", mode=0o600)
        replace_file(tmp_path / "plain", b"x", durable=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o644


def test_a_failed_replacement_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    # the rename fails: the target is a directory that is not empty
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        replace_file(target, b"new")
    assert (target / "inside").read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_a_large_file_is_written_whole(tmp_path):
    data = bytes(range(256)) * 40_000  # 10 MB: more than one write() may take
    replace_file(tmp_path / "big", data)
    assert (tmp_path / "big").read_bytes() == data
