import pytest

from headrace.storage import Log, LogConfig

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


@pytest.fixture
def small_config():
    return SMALL


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(log_dir):
    opened = []

    def _open(config=SMALL, recover=False, path=None):
        log = Log.open(path or log_dir, config, recover=recover)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        try:
            log.close()
        except Exception:
            pass
