{{ config(materialized='incremental', unique_key=('product_id', 'hour'), partition_by='hour',
          ranges={'views': (0, None), 'cart_adds': (0, None), 'orders': (0, None),
                  'units_sold': (0, None)},
          row_count_change=2.0) }}
-- The conversion funnel of each product per hour of event time: product page views, then
-- cart adds, then orders (and the units they sold), with the step-to-step conversion rates.
-- Incremental: each run recomputes only the hours its input topics changed in, so late events
-- correct their own hour.
WITH steps AS (
    SELECT product_id, date_trunc('HOUR', event_time) AS hour,
           1 AS views, 0 AS cart_adds, CAST(NULL AS STRING) AS order_id, 0 AS units
    FROM {{ ref('log/page_views') }}
    WHERE product_id IS NOT NULL
    UNION ALL
    SELECT product_id, date_trunc('HOUR', event_time), 0, 1, NULL, 0
    FROM {{ ref('log/cart_events') }}
    WHERE action = 'add' AND product_id IS NOT NULL
    UNION ALL
    SELECT item.product_id, date_trunc('HOUR', event_time), 0, 0, order_id, item.quantity
    FROM {{ ref('log/orders') }} LATERAL VIEW explode(items) AS item
    WHERE item.product_id IS NOT NULL
)
SELECT product_id,
       hour,
       CAST(sum(views) AS BIGINT) AS views,
       CAST(sum(cart_adds) AS BIGINT) AS cart_adds,
       count(DISTINCT order_id) AS orders,
       CAST(sum(units) AS BIGINT) AS units_sold,
       try_divide(CAST(sum(cart_adds) AS DOUBLE), sum(views)) AS view_to_cart_rate,
       try_divide(CAST(count(DISTINCT order_id) AS DOUBLE), sum(cart_adds)) AS cart_to_order_rate
FROM steps
GROUP BY product_id, hour
