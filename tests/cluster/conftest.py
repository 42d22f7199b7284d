"""The multihost fixture: one two-namespace cluster (`netns_cluster.py`) shared by the tests of a module.

The `multihost` tests run with the rest (`.venv/bin/python -m pytest`, what `.ci/run` runs; CI runs as root);
where this machine cannot make the namespaces (not root, no `ip`, no permission) each is skipped with that
reason, which `-ra` prints. `-m "not multihost"` (or `not slow`) leaves them out.
"""

from __future__ import annotations

import signal

import pytest

from tests.cluster.netns_cluster import NetnsCluster, cannot_make_namespaces

ROWS = 200  # distinct 0.8 s utterances over the 20 bundled samples
MANIFESTS = 4  # so, Ray Data blocks of 50 rows


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    multihost = [item for item in items if item.get_closest_marker("multihost") is not None]
    if not multihost:
        return
    reason = cannot_make_namespaces()  # asked once, and only when such a test was collected
    if reason is not None:
        for item in multihost:
            item.add_marker(pytest.mark.skip(reason=f"multihost: {reason}"))


@pytest.fixture(scope="module")
def cluster():
    cluster = NetnsCluster()
    failed = True

    def interrupted(signum, frame):  # a SIGTERM (a `timeout` around pytest) must still remove the namespaces
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        cluster.make_network()
        cluster.mount_small_disk()  # before the hosts start, so that they see it (NetnsCluster.mount_small_disk)
        cluster.start_s3()
        cluster.uris = cluster.upload_inputs(ROWS, MANIFESTS)
        cluster.start_head()
        cluster.start_worker()
        failed = False
        yield cluster
    finally:
        # logs are kept (without Ray's session dirs) only when the setup itself failed
        cluster.close(keep_logs=failed)
        signal.signal(signal.SIGTERM, previous)
