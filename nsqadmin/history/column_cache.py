"""The job's constant column expressions, built once per SparkContext rather than once per run.

Theory of operation. A PySpark Column is a proxy of a JVM object: each function, operator,
cast and alias that builds one is a py4j round trip, and each proxy the job drops is another
(py4j frees the JVM's reference). The rollup levels' aggregations and output columns are the
same in every run, yet building them was ~10,000 round trips, a third of a warm worker's
one-minute run. A Column holds an unresolved expression, which any number of query plans can
use, so :func:`per_context` keeps what a builder returns for as long as the SparkContext it
was built in lives (a new session, on a new JVM, builds them again).
"""

import weakref
from collections.abc import Callable, Hashable
from functools import wraps
from typing import TypeVar

from pyspark import SparkContext
from pyspark.sql import Column, functions as F

T = TypeVar("T")
_BUILT: "weakref.WeakKeyDictionary[SparkContext, dict[tuple, object]]" = weakref.WeakKeyDictionary()


def per_context(build: Callable[..., T]) -> Callable[..., T]:
    """``build`` (of hashable arguments) called once per SparkContext and arguments."""
    @wraps(build)
    def cached(*args: Hashable) -> T:
        context = SparkContext._active_spark_context
        if context is None:
            return build(*args)
        built = _BUILT.setdefault(context, {})
        key = (build.__qualname__, *args)
        if key not in built:
            built[key] = build(*args)
        return built[key]  # type: ignore[return-value]
    return cached


@per_context
def named_columns(*names: str) -> list[Column]:
    """Columns by name, for a select: a name given to a select is two py4j round trips more
    than a Column built before (the functions class looked up, then col() called)."""
    return [F.col(name) for name in names]
