"""Topic and channel name rules (internal/protocol/names.go)."""

import functools
import re

EPHEMERAL_SUFFIX = "#ephemeral"
MAX_NAME_LENGTH = 64
_VALID_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


@functools.lru_cache(maxsize=4096)
def is_valid_name(name: str) -> bool:
    """Same rule for topics and channels: 1-64 chars of [.a-zA-Z0-9_-], optional #ephemeral."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _VALID_NAME.fullmatch(name) is not None



def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)
