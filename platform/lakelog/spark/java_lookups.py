"""Spark's Java helpers that a classic session's PySpark looks up by name, found once per process.

PySpark's classic API reaches Spark's Java code through py4j by name, at every call: a column
by name in a `select` is ``sc._jvm.functions.col("x")``, and ``F.col("x")`` the same method of
``org.apache.spark.sql.functions`` looked up by its full name: three round trips to the driver's
JVM, two of which only find again what they found last time (which class the name is: a
reflection command that, for a short name, tries each imported package in turn, every miss a
search of the class path's jars; then that ``col`` is a method of it). A column by name, a
literal, a list of columns (``PythonUtils.toSeq``), a cast (``SparkSession.getActiveSession``)
each pay them. Counted in one 1,000-record batch of the carts' fold and its relay on a classic
session: about 410 of its 1,500 round trips were such look-ups (`benchmarks/README.md`,
"Twenty-first session").

`keep` puts those classes on the gateway's JVM view (where py4j's look-up by name only runs for
a name the view does not hold), as py4j classes that keep each static method once it is looked
up. What is kept is what py4j found, so every call and its answer are unchanged; only methods are
kept (a static field's value may change, so it is read again each time).
"""

from __future__ import annotations

import threading
from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView

#: The names PySpark looks its helper classes up by on the JVM view (`sc._jvm.<name>`).
LOOKED_UP = (
    "functions",
    "org.apache.spark.sql.functions",
    "PythonUtils",
    "PythonSQLUtils",
    "org.apache.spark.sql.classic.SparkSession",
)


class KeptMethods(JavaClass):
    """A py4j class that keeps each static method once it has been looked up."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaMember):  # a method handle holds no state of a call
            self.__dict__[name] = found
        return found


def keep(jvm: JVMView) -> None:
    """Hold `LOOKED_UP` on `jvm` (a classic session's ``sparkContext._jvm``), each the class py4j
    finds for it, once per view; a name that is no class in this Spark is left to py4j."""
    with _KEEPING:  # sessions created at once on threads: one fills the view
        kept: dict[str, KeptMethods] = {}  # by class: a short and a full name share its methods
        for name in LOOKED_UP:
            if name in vars(jvm):
                continue
            found = getattr(jvm, name)
            if isinstance(found, JavaClass):
                if found._fqn not in kept:
                    kept[found._fqn] = KeptMethods(found._fqn, found._gateway_client)
                vars(jvm)[name] = kept[found._fqn]


_KEEPING = threading.Lock()
