import os
import signal
import socket
import sys
from pathlib import Path

# the shared test helpers (tests/helpers/: launchers, fake rewards, tiny detectors) import by their module names, as
# a reward target names them (``pairwise_rewards:Brighter``); a subprocess gets the same folder on PYTHONPATH
HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from tiny_runs import NO_SAVES, small  # noqa: E402

torch.set_num_threads(min(2, os.cpu_count() or 1))

pytest_plugins = ["tiny_vlm"]  # the tiny VLM judge fixtures, shared by the reward and UniGenBench tests


@pytest.fixture
def one_thread():
    """Toy-sized ops: on shared cores a second thread mostly waits for the first (about 10 ms an op)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def signals_ignored_outside_training():
    """A signal that lands after ``train()`` returned must not stop pytest."""
    previous = {s: signal.signal(s, lambda *a: None) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in previous.items():
        signal.signal(s, h)


@pytest.fixture
def no_network(monkeypatch):
    """Offline for real: HF_HUB_OFFLINE is set and any socket connect fails (the tiny pipelines' tests)."""
    assert os.environ.get("HF_HUB_OFFLINE") == "1"

    def refuse(*args, **kwargs):
        raise AssertionError("tiny pipelines must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(scope="session")
def tiny_cfg_overrides():
    """Overrides that make the tiny-cpu recipe as small as a test wants."""
    return small(3, *NO_SAVES)
