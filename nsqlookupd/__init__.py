"""nsqlookupd: the discovery daemon (NSQ v1.3's nsqlookupd)."""
