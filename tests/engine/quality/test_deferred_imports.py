"""Modules Great Expectations imports for expectations lakelog does not use are imported on their
first use (`lakelog.quality.deferred`), and work as ever when used."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

from pyspark import cloudpickle

from lakelog.quality.deferred import Deferred, deferred


def run_python(code: str) -> dict:
    """`code`'s last line of output, as JSON, from a fresh interpreter (a module imported by
    this test process would be imported already)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_gx_leaves_scipy_stats_and_altair_until_an_expectation_uses_them():
    found = run_python("""
        import json, sys
        import lakelog.quality.gx
        before = {n: n in sys.modules for n in ("scipy.stats", "altair")}
        from great_expectations.expectations.core import (
            expect_column_kl_divergence_to_be_less_than as kl)
        entropy = kl.stats.entropy([0.5, 0.5], [0.9, 0.1])  # GX's own call, as its metric makes
        chart = kl.alt.Chart.__name__
        import scipy.stats
        print(json.dumps({"before": before, "entropy": entropy, "chart": chart,
                          "real": float(scipy.stats.entropy([0.5, 0.5], [0.9, 0.1])),
                          "same": scipy.stats.entropy is kl.stats.entropy,
                          "module": type(sys.modules["scipy.stats"]).__name__}))
    """)
    assert found["before"] == {"scipy.stats": False, "altair": False}
    assert found["entropy"] == found["real"] and found["same"]
    assert found["chart"] == "Chart"
    assert found["module"] == "module"  # the real one, not a stand-in


def test_a_stand_in_runs_its_module_once_on_first_use(tmp_path, monkeypatch):
    package = tmp_path / "deferred_probe"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("import sys\nsys.deferred_probe_runs += 1\nVALUE = 42\n")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "leaf.py").write_text("LEAF = 'leaf'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "deferred_probe_runs", 0, raising=False)
    for name in ("deferred_probe", "deferred_probe.inner", "deferred_probe.inner.leaf"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    with deferred("deferred_probe"):
        import deferred_probe as probe
        import deferred_probe as again
    assert isinstance(probe, Deferred) and again is probe
    assert sys.deferred_probe_runs == 0 and "deferred_probe" not in sys.modules
    # Pickled by name, as a module is (cloudpickle ships functions that name one to Spark).
    assert cloudpickle.loads(cloudpickle.dumps(lambda: probe.VALUE))() == 42
    assert pickle.loads(pickle.dumps(probe)) is sys.modules["deferred_probe"]
    probe_runs = sys.deferred_probe_runs

    assert probe.VALUE == 42 and sys.deferred_probe_runs == probe_runs == 1
    import deferred_probe as real
    assert real is sys.modules["deferred_probe"] and not isinstance(real, Deferred)
    assert real.VALUE == 42 and sys.deferred_probe_runs == 1
    from deferred_probe.inner import leaf  # a subpackage found through the real package's path
    assert leaf.LEAF == "leaf"


def test_a_submodule_imported_under_a_stand_in_loads_the_real_package(tmp_path, monkeypatch):
    package = tmp_path / "deferred_parent"
    package.mkdir()
    (package / "__init__.py").write_text("NAME = 'parent'\n")
    (package / "child.py").write_text("NAME = 'child'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("deferred_parent", "deferred_parent.child"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    with deferred("deferred_parent"):
        from deferred_parent import child  # needs the parent's __path__: the real one loads
    assert child.NAME == "child"
    assert sys.modules["deferred_parent"].NAME == "parent"


def test_a_module_imported_already_is_not_stood_in_for():
    import json as before

    with deferred("json"):
        import json as inside
    assert inside is before and not isinstance(inside, Deferred)
