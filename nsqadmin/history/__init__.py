"""The cluster's stats history: snapshots recorded by nsqadmin, rolled up by a PySpark job, read by the UI.

layout.py is the contract between the three: where files live and what their columns are.
"""
