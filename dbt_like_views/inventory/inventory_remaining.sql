{{ config(materialized='view', ranges={'remaining': (0, None)}) }}
-- Stock per product: the quantity the inventory table holds for it (as last counted, at
-- counted_at) minus the units of orders placed after that count. A negative `remaining` means
-- more was ordered than was in stock; its range check warns about it.
WITH sold AS (
    SELECT item.product_id, item.quantity, o.event_time
    FROM {{ ref('log/orders') }} o LATERAL VIEW explode(o.items) AS item
)
SELECT i.product_id,
       i.warehouse,
       i.quantity AS counted,
       i.updated_at AS counted_at,
       CAST(coalesce(sum(s.quantity), 0) AS BIGINT) AS sold_since,
       i.quantity - CAST(coalesce(sum(s.quantity), 0) AS BIGINT) AS remaining
FROM {{ ref('tables/inventory') }} i
LEFT JOIN sold s ON s.product_id = i.product_id AND s.event_time > i.updated_at
WHERE NOT i._deleted
GROUP BY i.product_id, i.warehouse, i.quantity, i.updated_at
