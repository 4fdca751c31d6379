"""The demo web shop as one declared pipeline: what `lakelog` commands use by default.

Its topics and product-stats consumer (`lakelog.demo.shop`), its shopping-cart aggregate with
the orders relay, its windowed aggregates (`shop_windows`) and joins (`shop_joins`), its
captured OLTP database (`shop_cdc`), its shoppers' saved price alerts matched against the
products' changes (`shop_search`), its event patterns — abandoned carts, search refinements
(`shop_patterns`) — the change stream of its customers table (the topic
``changes.tables.customers``), its orders enriched by a consumer group of two members and the SQL models of the repository's ``dbt_like_views/``.
"""

from __future__ import annotations

from pathlib import Path

from lakelog.demo import shop, shop_cdc, shop_search
from lakelog.demo.shop_joins import JOINS, ORDERS_ENRICHED
from lakelog.demo.shop_patterns import PATTERNS
from lakelog.demo.shop_windows import WINDOWS
from lakelog.pipeline import Pipeline

#: The demo's SQL models: ``dbt_like_views/`` of the checkout lakelog is installed from.
MODELS_DIR = Path(__file__).resolve().parents[3] / "dbt_like_views"

pipeline = Pipeline(
    "shop",
    topics=[*shop.TOPICS.values(), shop_search.ALERTS],
    consumers=[shop.PRODUCT_STATS_CONSUMER],
    aggregates=[shop.CARTS],
    windows=WINDOWS,
    joins=JOINS,
    percolators=[shop_search.PRICE_ALERTS],
    patterns=PATTERNS,
    sources=[shop_cdc.SHOP],
    change_streams=["tables/customers"],
    subject_columns=["user_id", "customer_id"],
    groups={ORDERS_ENRICHED.consumer.name: 2},
    models=MODELS_DIR,
)
