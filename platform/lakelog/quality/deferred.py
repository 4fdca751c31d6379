"""Modules imported for their first use rather than when an importer names them.

Great Expectations imports ``scipy.stats`` and ``altair`` at the top of the modules of three
expectations (a KL divergence, with its charts, and two Kolmogorov-Smirnov tests) and calls
them only when one of those runs; lakelog's suites use neither. The two took 1.3-1.5 s of a
3.4-3.9 s import of GX on a 2-core machine, time in which the importing thread holds the GIL
(benchmarks/README.md, "Thirty-first session").

`deferred` puts a stand-in for each such module in ``sys.modules`` while the importer runs and
takes it out again after: whatever the importer bound keeps the stand-in, which imports the real
module on its first attribute (any one, so a reader of ``__file__`` or ``__path__`` gets the
real one too) and from then on carries the real module's names. Code importing the module after
the block gets the real module, as ever.
"""

from __future__ import annotations

import copyreg
import importlib
import importlib.machinery
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager

#: Held while a stand-in goes into or out of ``sys.modules``: GX may be imported on a thread of
#: its own (a run's checks, preloaded) while steps import on others.
_SWAPS = threading.Lock()


class Deferred(types.ModuleType):
    """Stands in for module `name` until an attribute of it is asked for."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        # A spec of its own: the import system asks a module in sys.modules for its spec (to
        # tell whether it is still being imported), and that must not load the real one.
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def __getattr__(self, attribute: str):  # only for names the stand-in does not have
        real = self.load()
        return getattr(real, attribute)

    def load(self) -> types.ModuleType:
        """The real module, imported now unless it was; its names become the stand-in's.
        Threads that ask at once import it once: the import system locks each module (not
        `_SWAPS`, which an import holding a module's lock could wait for)."""
        name = self.__name__
        with _SWAPS:  # not another thread's real module, half imported
            if isinstance(sys.modules.get(name), Deferred):
                del sys.modules[name]
        real = importlib.import_module(name)
        vars(self).update(vars(real))
        return real


@contextmanager
def deferred(*names: str) -> Iterator[None]:
    """Imports inside that name one of `names` (a module not imported yet) get a stand-in
    (`Deferred`), which stays with them; after the block the name imports the real module."""
    with _SWAPS:
        standing = {n: Deferred(n) for n in names if n not in sys.modules}
        sys.modules.update(standing)
    try:
        yield
    finally:
        with _SWAPS:
            for name, stand_in in standing.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


def _by_name(module: Deferred):
    """Pickled as a module is: by name (cloudpickle, which ships functions to Spark's Python
    workers, picks a module's reducer by its exact type)."""
    return importlib.import_module, (module.__name__,)


copyreg.pickle(Deferred, _by_name)
