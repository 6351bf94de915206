"""A class-data-sharing archive of the rollup JVM's classes, so that a run starts in ~5 s, not ~8.

Theory of operation. A scheduled rollup is mostly JVM start-up: loading and verifying Spark's
classes, the same ones every run. The JDK's dynamic class-data sharing keeps them in an
archive that later JVMs map instead (-XX:SharedArchiveFile); a JVM started with
-XX:ArchiveClassesAtExit writes one as it exits. A JVM that maps a truncated archive crashes,
so the run that writes the archive has its JVM write it under a temporary name, waits for that
JVM to exit when its session stops (spark_session.py), and only then renames the file into
place; a run whose JVM did not exit cleanly deletes it. Runs are one at a time per stats dir,
and two writers in different stats dirs each write their own temporary file and the last
rename wins. An archive matches one Java, one Spark and one set of JVM options, so all three
are in its name. It lives in the user's cache directory; where that cannot be written, runs
simply start without one.
"""

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyspark

log = logging.getLogger("nsqadmin-rollup")

QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsqadmin-rollup"


def _installation_key(jvm_options: str) -> str:
    """What an archive must match: the java binary (and its build), pyspark's jars, the options."""
    java = shutil.which("java", path=os.environ.get("JAVA_HOME", "") + "/bin" + os.pathsep + os.environ["PATH"])
    java_real = Path(java).resolve() if java else Path("java")
    java_mtime = java_real.stat().st_mtime_ns if java else 0
    identity = f"{java_real}:{java_mtime}:{pyspark.__version__}:{Path(pyspark.__file__).parent}:{jvm_options}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


@dataclass
class ClassArchive:
    """The archive for one JVM configuration: ``option()`` for that JVM's command line, then
    ``finish(exited_cleanly)`` once it has exited."""
    path: Path
    writing: Path | None = None

    @classmethod
    def for_options(cls, jvm_options: str) -> "ClassArchive | None":
        directory = cache_dir()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.debug("no class archive: %s", exc)
            return None
        if not os.access(directory, os.W_OK):
            return None
        return cls(directory / f"spark-{_installation_key(jvm_options)}.jsa")

    def option(self) -> str:
        if self.path.exists():
            return f"{QUIET} -XX:SharedArchiveFile={self.path}"
        self.writing = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        return f"{QUIET} -XX:ArchiveClassesAtExit={self.writing}"

    def describe(self) -> str:
        """How this JVM uses the archive, once ``option()`` has been called."""
        if self.writing is not None:
            return "saving its classes in a class archive as it exits, for later runs"
        return "classes mapped from the class archive"

    def finish(self, exited_cleanly: bool) -> None:
        """Publish the archive the JVM wrote, if it wrote one and exited cleanly."""
        if self.writing is None:
            return
        if exited_cleanly and self.writing.exists() and self.writing.stat().st_size > 0:
            os.replace(self.writing, self.path)
            log.info("saved the JVM's classes in %s for faster start-ups", self.path)
        else:
            self.writing.unlink(missing_ok=True)
        self.writing = None
