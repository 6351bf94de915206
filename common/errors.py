"""Protocol errors that carry NSQ's wire code (internal/protocol/errors.go)."""


class ClientError(Exception):
    """An error reported to the peer as an error frame: ``"<code> <description>"``.

    A fatal error closes the connection after the frame is sent; NSQ's nsqd has only
    three non-fatal codes (E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED).
    """

    def __init__(self, code: str, description: str = "", fatal: bool = True):
        super().__init__(code, description)
        self.code = code
        self.description = description
        self.fatal = fatal

    def __str__(self) -> str:
        return f"{self.code} {self.description}" if self.description else self.code

    def to_bytes(self) -> bytes:
        return str(self).encode("utf-8", "surrogateescape")


def non_fatal(code: str, description: str) -> ClientError:
    return ClientError(code, description, fatal=False)
