"""The multihost fixture: one two-namespace cluster (`netns_cluster.py`) shared by the tests of a module."""

from __future__ import annotations

import signal

import pytest

from tests.cluster.netns_cluster import NetnsCluster, cannot_make_namespaces

ROWS = 200  # distinct 0.8 s utterances over the 20 bundled samples


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # minutes of a two-node cluster, and root: only when asked for by name
    if "multihost" in (config.option.markexpr or ""):
        return
    for item in items:
        if item.get_closest_marker("multihost") is not None:
            item.add_marker(pytest.mark.skip(reason="multihost: run with -m multihost (root, ip netns, ~10 min)"))


@pytest.fixture(scope="module")
def cluster():
    reason = cannot_make_namespaces()
    if reason is not None:
        pytest.skip(reason)
    cluster = NetnsCluster()
    failed = True

    def interrupted(signum, frame):  # a SIGTERM (a `timeout` around pytest) must still remove the namespaces
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        cluster.make_network()
        cluster.start_s3()
        cluster.uris = cluster.upload_inputs(ROWS)
        cluster.start_head()
        cluster.start_worker()
        failed = False
        yield cluster
    finally:
        # logs are kept (without Ray's session dirs) only when the setup itself failed
        cluster.close(keep_logs=failed)
        signal.signal(signal.SIGTERM, previous)
