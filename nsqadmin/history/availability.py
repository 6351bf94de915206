"""Whether this nsqadmin can keep a stats history; if not, why, and how to turn it on.

The history needs the packages of the ``history`` extra (pyarrow for its files, msgspec for the
recorder, pyspark for the rollup job: ``pip install '.[history]'``) and, when nsqadmin runs the
rollup job itself (--rollup-interval), a Java runtime for Spark, found the way Spark's launcher
(bin/spark-class) finds it: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH.
Without them nsqadmin runs with the history off instead of failing: it says why once at start,
and the pages and the history's API routes say so too. With --rollup-interval=0 (the job run
elsewhere, by nsqadmin-rollup) no Java is needed here.

Nothing here imports the extra's packages: it only looks for them. ``nsqadmin-rollup`` starts
here too, so that without them it says so in one line instead of a traceback.
"""

import importlib.util
import os
import shutil
import sys

PACKAGES = ("pyarrow", "msgspec", "pyspark")
TURN_ON_PACKAGES = "pip install '.[history]' (the history extra) turns it on"
TURN_ON_JAVA = ("install one (Debian: default-jre-headless) or set JAVA_HOME, "
                "or run the job elsewhere (--rollup-interval=0)")


def missing_packages() -> list[str]:
    return [name for name in PACKAGES if importlib.util.find_spec(name) is None]


def java_runtime(environ: os._Environ | dict = os.environ) -> str | None:
    """The java Spark's launcher would run, or None."""
    home = environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        return java if os.access(java, os.X_OK) else None
    return shutil.which("java", path=environ.get("PATH", os.defpath))


def _no_java(environ: os._Environ | dict) -> str:
    home = environ.get("JAVA_HOME")
    where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH and JAVA_HOME is not set"
    return f"the rollup job needs a Java runtime ({where}): {TURN_ON_JAVA}"


def _not_installed(missing: list[str]) -> str:
    return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: {TURN_ON_PACKAGES}"


def off_reason(opts, environ: os._Environ | dict = os.environ) -> str | None:
    """Why the history is off, with how to turn it on; None when it can run."""
    missing = missing_packages()
    if missing:
        return _not_installed(missing)
    if opts.rollup_interval and java_runtime(environ) is None:
        return _no_java(environ)
    return None


def rollup_command() -> int:
    """``nsqadmin-rollup``: the job (rollup_main.py), or a one-line refusal without the packages."""
    missing = missing_packages()
    if missing:
        print(f"nsqadmin-rollup: {_not_installed(missing)}", file=sys.stderr)
        return 1
    from .rollup_main import main
    return main()
