"""I/O plumbing shared by the daemons (HTTP serving on trio)."""
