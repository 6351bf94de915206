"""I/O plumbing shared by the programs: HTTP serving on trio and the entry point for the daemons, and
where every program's log lines go (logs.py), for the daemons and the utilities."""
