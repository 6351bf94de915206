"""The rollups the README defines, computed by DuckDB straight from the raw files: an oracle for the
Spark job that shares none of its code.

Each window of each level is computed from the snapshots that fall in it (not from the finer
windows, except where the README defines a value that way: ``depth_p95`` of an hour or a day is
the percentile of its finer windows' means):

- a snapshot's deltas come from the series' previous snapshot, if it is at most 15 minutes
  older; a restart (a new ``start_time``, or any counter lower than before) makes every counter's
  value its delta; ``finished`` is the messages in less the growth of depth + in flight +
  deferred, never below 0; ``covered`` is the time since the previous snapshot;
- a node's window: counters and covered time summed over its snapshots, rate = messages /
  covered, depth max / mean / last, in-flight and clients max / last, the largest e2e p99,
  the last paused; ``depth_p95`` of a minute over its snapshots (linear interpolation);
- ALL_NODES: the cluster's poll is the sum of the depths, in-flight counts and clients the nodes
  reported at one poll time; its samples, maxima and (for a minute) ``depth_p95`` come from
  those polls; counters, rates, means and last values are the sums of the nodes' windows, covered
  time the longest node's, e2e the largest, paused whether any node's last was.
"""

from pathlib import Path

import duckdb

MINUTE_US, HOUR_US, DAY_US = 60_000_000, 3_600_000_000, 86_400_000_000
MAX_GAP_US = 15 * MINUTE_US
LEVELS = {"1m": MINUTE_US, "1h": HOUR_US, "1d": DAY_US}
FINER = {"1h": "1m", "1d": "1h"}
COLUMNS = ("samples", "covered_seconds", "messages", "rate", "requeues", "timeouts", "finished", "depth_max",
           "depth_avg", "depth_p95", "depth_last", "in_flight_max", "in_flight_last", "clients_max",
           "clients_last", "e2e_p99_max", "paused_last")

SNAPSHOTS = """
CREATE TABLE snapshots AS
SELECT node, topic, channel, epoch_us(ts) AS t,
       coalesce(depth, 0) AS depth, coalesce(in_flight, 0) AS in_flight, coalesce(deferred, 0) AS deferred,
       coalesce(message_count, 0) AS m, coalesce(requeue_count, 0) AS r, coalesce(timeout_count, 0) AS o,
       coalesce(client_count, 0) AS clients, coalesce(paused, false) AS paused,
       e2e_ns['0.99'] AS e2e, start_time
FROM read_parquet($files, union_by_name = true)
WHERE NOT coalesce(missing, false)
"""

DELTAS = f"""
CREATE TABLE deltas AS
WITH lagged AS (
    SELECT *, lag(t) OVER s AS pt, lag(m) OVER s AS pm, lag(r) OVER s AS pr, lag(o) OVER s AS po,
           lag(depth + in_flight + deferred) OVER s AS pb, lag(start_time) OVER s AS pst
    FROM snapshots WINDOW s AS (PARTITION BY node, topic, channel ORDER BY t)
), flagged AS (
    SELECT *, pt IS NOT NULL AND t - pt <= {MAX_GAP_US} AS continues,
           coalesce(start_time <> pst, false) OR m < pm OR r < pr OR o < po AS restarted
    FROM lagged
), counted AS (
    SELECT *,
           CASE WHEN NOT continues THEN 0 ELSE t - pt END AS dt,
           CASE WHEN NOT continues THEN 0 WHEN restarted THEN m ELSE m - pm END AS dm,
           CASE WHEN NOT continues THEN 0 WHEN restarted THEN r ELSE r - pr END AS dr,
           CASE WHEN NOT continues THEN 0 WHEN restarted THEN o ELSE o - po END AS d_o
    FROM flagged
)
SELECT *, CASE WHEN NOT continues THEN 0 ELSE greatest(0, dm - (depth + in_flight + deferred - pb)) END AS df
FROM counted
"""


def _minute_p95(level: str) -> str:
    """A minute's depth_p95 over its snapshots; an hour's or a day's comes later (_p95_update)."""
    return "quantile_cont(depth, 0.95)" if level == "1m" else "NULL::DOUBLE"


def _node_windows(level: str) -> str:
    width = LEVELS[level]
    return f"""
CREATE TABLE node_{level} AS
SELECT node, topic, channel, t // {width} * {width} AS w,
       count(*) AS samples, sum(dt) / 1e6 AS covered_seconds, sum(dm) AS messages,
       CASE WHEN sum(dt) > 0 THEN sum(dm) / (sum(dt) / 1e6) ELSE 0 END AS rate,
       sum(dr) AS requeues, sum(d_o) AS timeouts, sum(df) AS finished,
       max(depth) AS depth_max, avg(depth) AS depth_avg, {_minute_p95(level)} AS depth_p95,
       arg_max(depth, t) AS depth_last, max(in_flight) AS in_flight_max, arg_max(in_flight, t) AS in_flight_last,
       max(clients) AS clients_max, arg_max(clients, t) AS clients_last, max(e2e) AS e2e_p99_max,
       arg_max(paused, t) AS paused_last
FROM deltas d GROUP BY node, topic, channel, w;
{"" if level == "1m" else _p95_update("node", level)}
"""


def _p95_update(kind: str, level: str) -> str:
    """An hour's or a day's depth_p95: the percentile of its finer windows' depth_avg."""
    width, finer = LEVELS[level], FINER[level]
    return f"""
UPDATE {kind}_{level} AS c SET depth_p95 = (
    SELECT quantile_cont(f.depth_avg, 0.95) FROM {kind}_{finer} f
    WHERE f.node = c.node AND f.topic = c.topic AND f.channel = c.channel AND f.w // {width} * {width} = c.w)
"""


def _cluster_windows(level: str) -> str:
    width = LEVELS[level]
    return f"""
CREATE TABLE all_{level} AS
WITH polls AS (
    SELECT topic, channel, t, sum(depth) AS depth, sum(in_flight) AS in_flight, sum(clients) AS clients
    FROM snapshots GROUP BY topic, channel, t
), own AS (
    SELECT topic, channel, t // {width} * {width} AS w, count(*) AS samples, max(depth) AS depth_max,
           {_minute_p95(level)} AS depth_p95,
           max(in_flight) AS in_flight_max, max(clients) AS clients_max
    FROM polls GROUP BY topic, channel, w
), nodes AS (
    SELECT topic, channel, w, max(covered_seconds) AS covered_seconds, sum(messages) AS messages,
           sum(rate) AS rate, sum(requeues) AS requeues, sum(timeouts) AS timeouts, sum(finished) AS finished,
           sum(depth_avg) AS depth_avg, sum(depth_last) AS depth_last, sum(in_flight_last) AS in_flight_last,
           sum(clients_last) AS clients_last, max(e2e_p99_max) AS e2e_p99_max, bool_or(paused_last) AS paused_last
    FROM node_{level} GROUP BY topic, channel, w
)
SELECT '*' AS node, * FROM own JOIN nodes USING (topic, channel, w);
{"" if level == "1m" else _p95_update("all", level)}
"""


def compute(db: duckdb.DuckDBPyConnection, raw_files: list[Path]) -> None:
    """Every level's windows from ``raw_files`` into the tables node_<level> and all_<level>."""
    db.execute("SET TimeZone = 'UTC'")
    db.execute(SNAPSHOTS, {"files": [str(path) for path in raw_files]})
    db.execute(DELTAS)
    for level in LEVELS:
        db.execute(_node_windows(level))
        db.execute(_cluster_windows(level))


def expected_rollups(raw_files: list[Path]) -> dict[str, list[dict]]:
    """Every level's windows (``rollups()`` rows: ts in unix seconds) from ``raw_files``."""
    db = duckdb.connect()
    compute(db, raw_files)
    out = {}
    for level in LEVELS:
        rows = db.execute(f"""
            SELECT w // 1000000 AS ts, node, topic, channel, {", ".join(COLUMNS)} FROM node_{level}
            UNION ALL SELECT w // 1000000, node, topic, channel, {", ".join(COLUMNS)} FROM all_{level}
            ORDER BY node, topic, channel, ts""").fetchall()
        names = ("ts", "node", "topic", "channel", *COLUMNS)
        out[level] = [dict(zip(names, row)) for row in rows]
    db.close()
    return out
