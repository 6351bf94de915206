"""One local SparkSession for every in-process test of the rollup job (the JVM starts once)."""

import pytest

from nsqadmin.history.spark_session import SessionOnDemand


@pytest.fixture(scope="session")
def spark():
    """``spark(raw_bytes)`` as run_rollup takes it: the production builder on local[2], started once."""
    session = SessionOnDemand("local[2]")
    yield session
    session.stop()
