"""The rollup windows and the name of a sum across nodes: what the job writes (layout.py) and what the
pages and the API ask for, importable without the history extra."""

ALL_NODES = "*"
WINDOWS = {"1m": 60, "1h": 3600, "1d": 86400}
