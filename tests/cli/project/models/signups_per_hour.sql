-- Sign-ups per plan and hour, from the minute windows.
{{ config(materialized='table') }}
SELECT plan, date_trunc('HOUR', window_start) AS hour, sum(signups) AS signups
FROM {{ ref('streams/signups_per_minute') }}
GROUP BY plan, date_trunc('HOUR', window_start)
