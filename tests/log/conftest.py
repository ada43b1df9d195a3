import pytest

from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000


def batch(n: int = 1, *, ts: int = NOW, size: int = 10, **kw) -> bytes:
    """n records with values of `size` bytes and timestamps ts, ts+1, ..."""
    return build_batch([(None, b"x" * size, (), ts + i) for i in range(n)], **kw)


@pytest.fixture
def open_log(tmp_path):
    opened = []

    def _open(config: LogConfig | None = None, **kw) -> UnifiedLog:
        log = UnifiedLog.open(tmp_path / "topic-0", config or LogConfig(), **{"now_ms": NOW, **kw})
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
