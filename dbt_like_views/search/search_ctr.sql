{{ config(materialized='table', ranges={'click_through_rate': (0, 1), 'searches': (1, None)},
          expect=[('expect_column_values_to_be_unique', {'column': 'query'})]) }}
-- Click-through rate per search query: the share of searches with at least one click on a
-- result within the hour after the search, from the stream-stream join of searches and clicks
-- (one row per click, one unclicked row per search that got none, and one row without a search
-- per click whose search never came: those have no search_time and are left out below).
-- Only searches whose hour has closed count: the join emits a search without a click only once
-- its watermark (newest event time - 10 minutes) passes search time + 1 hour, so counting the
-- newer ones would see their clicks but not their misses and overstate the rate.
WITH joined AS (
    SELECT * FROM {{ ref('streams/search_clicks') }}
),
decided AS (
    SELECT * FROM joined
    WHERE search_time <= (SELECT max(search_time) FROM joined) - INTERVAL 70 MINUTES
)
SELECT query,
       count(DISTINCT search_event_id) AS searches,
       count(DISTINCT CASE WHEN clicked THEN search_event_id END) AS searches_with_click,
       count(DISTINCT click_event_id) AS clicks,
       try_divide(CAST(count(DISTINCT CASE WHEN clicked THEN search_event_id END) AS DOUBLE),
                  count(DISTINCT search_event_id)) AS click_through_rate,
       avg(CASE WHEN clicked THEN position END) AS mean_click_position
FROM decided
GROUP BY query
