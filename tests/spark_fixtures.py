"""One local SparkSession for every in-process test of the rollup job (the JVM starts once)."""

import pytest

from nsqadmin.history.spark_session import SessionOnDemand

# One object for every module that imports the fixture: pytest makes a session fixture of each
# import, and pyspark gives them all the same JVM, which the first teardown's stop() ends.
_SESSION = SessionOnDemand("local[2]")


@pytest.fixture(scope="session")
def spark():
    """``spark(raw_bytes)`` as run_rollup takes it: the production builder on local[2], started once."""
    yield _SESSION
    _SESSION.stop()
