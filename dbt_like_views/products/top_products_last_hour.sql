{{ config(materialized='table', ranges={'rank': (1, 10), 'views': (0, None)}) }}
-- The ten most viewed products of the last complete hour of event time in the funnel (ties
-- broken by orders, then product id): the hour before the newest one, which is still filling.
-- Event time, not the wall clock, so a replay of old events gives the same answer.
WITH latest AS (
    SELECT max(hour) - INTERVAL 1 HOUR AS hour FROM {{ ref('product_funnel_hourly') }}
),
ranked AS (
    SELECT f.hour, f.product_id, f.views, f.cart_adds, f.orders, f.units_sold,
           row_number() OVER (ORDER BY f.views DESC, f.orders DESC, f.product_id) AS rank
    FROM {{ ref('product_funnel_hourly') }} f
    JOIN latest ON f.hour = latest.hour
)
SELECT * FROM ranked WHERE rank <= 10
