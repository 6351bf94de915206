"""nsqlookupd: not implemented yet (see the issue tracker)."""
