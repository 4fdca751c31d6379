{{ config(materialized='incremental', unique_key='customer_id',
          ranges={'orders': (1, None), 'lifetime_value': (0, None)}, row_count_change=1.0) }}
-- Per customer: orders placed and money spent so far, with the customer's current name and
-- country from the captured customers table. Shop user u-000123 is customer 123; orders of a
-- user who is not a (live) customer are left out.
-- Incremental by customer: a new order or a changed customer row recomputes that customer.
WITH orders AS (
    SELECT try_cast(substr(user_id, 3) AS BIGINT) AS customer_id, order_id, total, event_time
    FROM {{ ref('log/orders') }}
)
SELECT c.customer_id,
       c.name,
       c.country,
       count(DISTINCT o.order_id) AS orders,
       CAST(sum(o.total) AS DECIMAL(18, 2)) AS lifetime_value,
       min(o.event_time) AS first_order_time,
       max(o.event_time) AS last_order_time
FROM orders o
JOIN {{ ref('tables/customers') }} c
  ON o.customer_id = c.customer_id AND NOT c._deleted
GROUP BY c.customer_id, c.name, c.country
