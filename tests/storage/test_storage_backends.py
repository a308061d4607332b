"""The I/O backend contract, run against each backend (the Log-level contract is the rest of
the suite through the ``open_log`` and ``backend`` fixtures)."""

import errno
import os
import threading

import pytest

from headrace.storage.io import get_backend


def test_write_read_fsync(tmp_path, backend):
    io = get_backend(backend)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        io.write_all(fd, b"hello", 5, 0)
        io.write_all(fd, memoryview(bytearray(b"--world--"))[2:7], 5, 5)
        io.write_all(fd, bytearray(b"!"), 1, 10)
        io.fsync_many([fd, fd])
        assert io.pread(fd, 11, 0) == b"helloworld!"
        assert io.pread(fd, 100, 5) == b"world!"  # short only at the end of the file
        assert io.pread(fd, 10, 50) == b""
        big = os.urandom(3 << 20)
        io.write_all(fd, memoryview(big), len(big), 11)
        assert io.pread(fd, len(big), 11) == big
    finally:
        os.close(fd)


def test_errors_carry_errno(tmp_path, backend):
    io = get_backend(backend)
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as e:
            io.write_all(fd, b"x", 1, 0)
        assert e.value.errno == errno.EBADF
    finally:
        os.close(fd)
    with pytest.raises(OSError) as e:
        io.fsync_many([fd])
    assert e.value.errno == errno.EBADF


def test_threads_each_use_the_backend(tmp_path, backend):
    io = get_backend(backend)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    errors = []

    def work(i):
        try:
            for j in range(200):
                data = bytes([i]) * 512
                io.write_all(fd, data, 512, (i * 200 + j) * 512)
                assert io.pread(fd, 512, (i * 200 + j) * 512) == data
            io.fsync_many([fd])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)
    assert not errors, errors


def test_ring_writes(tmp_path, backend):
    if backend != "io_uring":
        pytest.skip("io_uring only")
    from headrace.storage.io import UringBackend

    io = UringBackend(ring_writes=True)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        big = os.urandom(1 << 20)
        io.write_all(fd, memoryview(big)[1:], len(big) - 1, 3)
        io.write_all(fd, b"abc", 3, 0)
        io.fsync_many([fd])
        assert io.pread(fd, len(big) + 2, 0) == b"abc" + big[1:]
    finally:
        os.close(fd)
        io.close()
    ro = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            UringBackend(ring_writes=True).write_all(ro, b"x", 1, 0)
    finally:
        os.close(ro)
