import signal, subprocess
import pytest
from tests.conftest import BrokerProcess
from tests.zk.test_cluster_elect_leaders import test_elect_leaders_moves_leadership_back_to_the_preferred_replica as inner

_orig = BrokerProcess.stop

def _stop(self, timeout=30.0):
    try:
        return _orig(self, timeout)
    except subprocess.TimeoutExpired:
        self.process.send_signal(signal.SIGABRT)
        self.process.wait(10)
        raise

@pytest.mark.parametrize("i", range(5))
def test_loop(make_broker, chroot, zk, monkeypatch, i):
    monkeypatch.setattr(BrokerProcess, "stop", _stop)
    inner(make_broker, chroot, zk)
