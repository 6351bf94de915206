"""nsqadmin: not implemented yet (see the issue tracker)."""
