"""Model files: the config header, refs, names, and the dependency graph with its errors."""

from __future__ import annotations

import pytest
from view_helpers import MODELS, TABLES, demo_graph

from lakelog.views import ModelError, load_models
from lakelog.views.graph import ROOT_GROUP
from lakelog.views.parse import parse_model
from lakelog.views.progress import fingerprint


def parse(text: str):
    return parse_model(text, name="m", file="models/m.sql", folder="f")


def write(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return root


def test_config_header_and_refs():
    model = parse(
        "-- why this model exists\n"
        "{{ config(materialized='incremental', unique_key=['product_id', 'hour'],\n"
        "          partition_by='hour', ranges={'views': (0, None)}, row_count_change=0.5) }}\n"
        "SELECT p.product_id, '{x}' AS s FROM {{ ref('log/page_views') }} p\n"
        "JOIN {{ref(\"upstream_1\")}} u USING (product_id) JOIN {{ ref('log/page_views') }} q;\n"
    )
    config = model.config
    assert config.materialized == "incremental"
    assert config.unique_key == ("product_id", "hour")
    assert config.partition_by == "hour"
    assert config.ranges == {"views": (0, None)}
    assert config.row_count_change == 0.5
    assert model.refs == ("log/page_views", "upstream_1")
    assert model.path == "views/m" and model.stored
    lines = model.template.split("\n")
    # The header's lines stay (blank), so Spark's line numbers are the file's.
    assert lines[3] == "SELECT p.product_id, '{{x}}' AS s FROM {ref_0} p"
    assert lines[4] == "JOIN {ref_1} u USING (product_id) JOIN {ref_0} q"
    assert lines[1:3] == ["", ""]


def test_defaults_to_a_view_and_keeps_sql_without_refs_as_is():
    model = parse("SELECT '{a}' AS x")
    assert model.config.materialized == "view" and not model.stored
    assert model.refs == () and model.template == "SELECT '{a}' AS x"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{{ config(materialized='table' }}\nSELECT 1", "line 1: cannot parse"),
        ("{{ config(materialized='tabel') }}\nSELECT 1", "materialized='tabel' is not one of"),
        ("{{ config(materialised='table') }}\nSELECT 1", "unknown config key 'materialised'"),
        ("{{ config(materialized=kind) }}\nSELECT 1", "must be a literal, not 'kind'"),
        ("{{ config('table') }}\nSELECT 1", "keyword arguments only"),
        ("{{ config(materialized='incremental') }}\nSELECT 1", "needs a unique_key"),
        ("{{ config(materialized='incremental', unique_key='id', partition_by='hour') }}\nSELECT 1",
         "needs the column 'hour' in unique_key"),
        ("{{ config(materialized='incremental', unique_key='id', partition_by='day') }}\nSELECT 1",
         "partition_by='day' is not 'hour'"),
        ("{{ config(materialized='table', unique_key='id') }}\nSELECT 1",
         "apply to incremental models only"),
        ("{{ config(row_count_change=0.5) }}\nSELECT 1", "a view keeps no previous version"),
        ("{{ config(materialized='table', ranges={'x': (2, 1)}) }}\nSELECT 1", "low > high"),
        ("{{ config(materialized='table', ranges=['x']) }}\nSELECT 1", "ranges must map"),
        ("{{ config(materialized='table', expect='x') }}\nSELECT 1", "expect must be a list"),
        ("{{ config(materialized='table', expect=[('is_nice', {})]) }}\nSELECT 1",
         "'is_nice' is not an expectation name"),
        ("{{ config(materialized='table', ranges={['x']: (0, 1)}) }}\nSELECT 1",
         "must be a literal"),  # unhashable: literal_eval raises TypeError
        ("SELECT 1\n{{ config(materialized='table') }}", "line 2: config(...) must come first"),
        ("{{ config() }}\n-- only a comment", "no SQL after its config"),
        ("SELECT * FROM {{ source('a', 'b') }}", "unknown tag \"source('a', 'b')\""),
        ("{% if x %}SELECT 1{% endif %}", "Jinja statements and comments are not supported"),
        ("SELECT * FROM {{ ref('../../etc/passwd') }}", "is neither a model name"),
        ("SELECT * FROM {{ ref('log/../tables/x') }}", "is neither a model name"),
        ("SELECT * FROM {{ ref('views/other') }}", "is neither a model name"),
        ("SELECT * FROM {{ ref('a', 'b') }}", "ref takes one argument"),
        ("SELECT * FROM {{ ref(1) }}", "ref needs a string"),
    ],
)
def test_bad_model_files_name_the_file_and_the_problem(text, problem):
    with pytest.raises(ModelError, match="^models/m.sql: ") as raised:
        parse(text)
    assert problem in str(raised.value)


def test_demo_models_form_a_graph_in_dependency_order():
    graph = demo_graph()
    assert set(graph.models) == {
        "product_funnel_hourly", "top_products_last_hour", "customer_lifetime_value",
        "search_ctr", "inventory_remaining",
    }
    order = list(graph.models)
    assert order.index("product_funnel_hourly") < order.index("top_products_last_hour")
    assert graph.upstream("top_products_last_hour") == ("product_funnel_hourly",)
    assert graph.inputs("top_products_last_hour") == ("views/product_funnel_hourly",)
    assert graph.inputs("customer_lifetime_value") == ("log/orders", "tables/customers")
    assert {m.folder for m in graph.models.values()} == {
        "funnel", "products", "customers", "search", "inventory",
    }
    materialized = {n: m.config.materialized for n, m in graph.models.items()}
    assert materialized["product_funnel_hourly"] == "incremental"
    assert materialized["inventory_remaining"] == "view"
    assert graph.models["product_funnel_hourly"].file == str(
        MODELS / "funnel" / "product_funnel_hourly.sql"
    )


def test_inputs_of_a_model_reach_through_view_models(tmp_path):
    write(tmp_path, {
        ".backup/base.sql": "not even SQL {{",
        "base.sql": "SELECT * FROM {{ ref('log/orders') }}",
        "a/mid.sql": "{{ config(materialized='table') }}\nSELECT * FROM {{ ref('base') }}",
        "a/b/top.sql": "SELECT * FROM {{ ref('base') }} JOIN {{ ref('mid') }} USING (x)",
    })
    graph = load_models(tmp_path, {"log/orders"})
    assert graph.inputs("top") == ("log/orders", "views/mid")
    assert graph.models["base"].folder == ROOT_GROUP
    assert graph.models["top"].folder == "a_b"
    # The view's SQL is part of what its readers compute: editing it must rebuild them.
    assert graph.models["top"].inlined == (graph.models["base"].template,)
    assert graph.models["mid"].inlined == (graph.models["base"].template,)
    write(tmp_path, {"base.sql": "SELECT * FROM {{ ref('log/orders') }} WHERE x > 10"})
    edited = load_models(tmp_path, {"log/orders"})
    assert fingerprint(edited.models["mid"]) != fingerprint(graph.models["mid"])
    assert fingerprint(edited.models["base"]) != fingerprint(graph.models["base"])


@pytest.mark.parametrize(
    ("files", "culprit", "problem"),
    [
        ({"a.sql": "SELECT * FROM {{ ref('nope') }}"}, "a.sql",
         "unknown ref 'nope': no such model"),
        ({"a.sql": "SELECT * FROM {{ ref('log/nope') }}"}, "a.sql",
         "unknown ref 'log/nope': no such lakelog table"),
        ({"x/a.sql": "SELECT 1", "y/a.sql": "SELECT 2"}, "y/a.sql",
         "duplicate model name 'a', also defined in"),
        ({"a.sql": "SELECT * FROM {{ ref('b') }}", "b.sql": "SELECT * FROM {{ ref('c') }}",
          "c.sql": "SELECT * FROM {{ ref('a') }}"}, "a.sql", "dependency cycle: "),
        ({"a.sql": "SELECT * FROM {{ ref('a') }}"}, "a.sql", "dependency cycle: "),
        ({"my-model.sql": "SELECT 1"}, "my-model.sql", "model name 'my-model' may use only"),
        ({"abc\n.sql": "SELECT 1"}, "abc\n.sql", "model name 'abc\\n' may use only"),
        ({"my dir/a.sql": "SELECT 1"}, "my dir/a.sql", "folder 'my dir' may use only"),
        ({"a.sql": "\udcff"}, "a.sql", "not UTF-8 text"),
    ],
)
def test_bad_graphs_fail_at_load_naming_the_file(tmp_path, files, culprit, problem):
    write(tmp_path, files)
    with pytest.raises(ModelError) as raised:
        load_models(tmp_path, {"log/orders"})
    message = str(raised.value)
    assert message.startswith(str(tmp_path / culprit) + ": ")
    assert problem in message


def test_a_cycle_lists_its_files_in_order(tmp_path):
    write(tmp_path, {"a.sql": "SELECT * FROM {{ ref('b') }}",
                     "b.sql": "SELECT * FROM {{ ref('a') }}"})
    with pytest.raises(ModelError) as raised:
        load_models(tmp_path, TABLES)
    a, b = tmp_path / "a.sql", tmp_path / "b.sql"
    assert str(raised.value).endswith(f"dependency cycle: {a} -> {b} -> {a}")


def test_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(ModelError, match="no such folder of SQL models"):
        load_models(tmp_path / "nope", TABLES)
