import dataclasses

import pytest

from headrace.storage import Log, LogConfig
from headrace.storage.io import BACKENDS, available_backends

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each I/O backend in turn: tests that use it form the backend contract suite."""
    if request.param not in available_backends():
        pytest.skip(f"I/O backend {request.param} is not available here")
    return request.param


@pytest.fixture
def small_config(backend):
    return dataclasses.replace(SMALL, io_backend=backend)


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(log_dir, backend):
    opened = []

    def _open(config=SMALL, recover=False, path=None):
        config = dataclasses.replace(config, io_backend=backend)
        log = Log.open(path or log_dir, config, recover=recover)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        try:
            log.close()
        except Exception:
            pass
