"""The rollup job's SparkSession as the worker's supervisor sees it from outside: its stderr."""

import subprocess
import sys
import textwrap

# Builds the production session, makes the JVM open its accumulator connection to the driver (a
# Python map on an RDD does), kills the JVM under the driver as a killed worker's process group can
# (the JVM first), and waits until the driver has seen the connection end.
KILLED_UNDER_THE_DRIVER = textwrap.dedent("""
    import logging, os, threading
    from pyspark import SparkContext
    from nsqadmin.history.spark_session import _log4j2_file, build_session

    ended = threading.Event()

    class Ended(logging.Handler):
        def emit(self, record):
            if "accumulator connection" in record.getMessage():
                ended.set()

    log = logging.getLogger("nsqadmin-rollup")  # as the worker sets it up: this logger only, at debug
    log.setLevel(logging.DEBUG)
    log.addHandler(logging.StreamHandler())
    log.addHandler(Ended())
    session = build_session("local[1]", _log4j2_file())
    assert session.sparkContext.parallelize([1, 2]).map(lambda x: x + 1).sum() == 5
    os.kill(SparkContext._gateway.proc.pid, 9)
    print("ended" if ended.wait(60) else "not seen", flush=True)
    os._exit(0)
""")


def test_a_jvm_killed_under_the_driver_leaves_a_debug_line_and_no_traceback():
    child = subprocess.run([sys.executable, "-c", KILLED_UNDER_THE_DRIVER], capture_output=True, text=True,
                           timeout=180)
    assert child.stdout == "ended\n", child.stderr
    assert "Traceback" not in child.stderr
    assert "accumulator connection from" in child.stderr and "EOFError()" in child.stderr
