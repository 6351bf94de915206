"""The cluster as NSQ's programs see it from outside (NSQ's internal/clusterinfo and internal/http_api).

Used by nsqadmin and by the utilities that ask the cluster (nsq_stat, nsq_to_file):

- ``upstream.py``: the HTTP client for nsqd and nsqlookupd, with NSQ's deadlines and Go's error texts;
- ``cluster.py``: the questions (topics, producers, stats) asked of every lookupd or nsqd at once,
  with NSQ's partial-error rules, and the actions (create, delete, pause, empty, tombstone);
- ``producers.py`` and ``stats.py``: the cluster model, pure functions over the daemons' JSON.
"""
