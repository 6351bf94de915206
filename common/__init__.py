"""Sans-IO NSQ wire protocols shared by nsqd, nsqlookupd, nsqadmin and the bench client.

Nothing in this package touches a socket, a clock or a file: bytes go in, events come
out, and events become bytes (the h11 shape).
"""

VERSION = "1.3.0"
