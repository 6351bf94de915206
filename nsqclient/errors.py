"""The client's exceptions (go-nsq errors.go, with NSQ's error codes kept).

::

    NSQError
    ├── ProtocolError          nsqd answered with an error frame: .code ("E_BAD_TOPIC", ...), .description
    │   └── AuthError          AUTH was refused, or nsqd requires AUTH and no auth_secret is set
    ├── ConnectError           nsqd could not be reached (refused, timed out, TLS handshake failed)
    ├── ConnectionClosedError  the connection ended; whether nsqd took a pending command is unknown
    ├── StoppedError           the Producer or Consumer was stopped
    └── ConfigError            an option name or value that go-nsq would refuse (also a ValueError)
"""

from common.client_v2 import NON_FATAL_ERRORS


class NSQError(Exception):
    """Base of every exception this library raises."""


class ProtocolError(NSQError):
    """An error frame from nsqd, or the same error found before sending (an invalid name)."""

    def __init__(self, code: str, description: str = ""):
        super().__init__(code, description)
        self.code = code
        self.description = description

    @property
    def fatal(self) -> bool:
        """Whether nsqd closes the connection after this error."""
        return self.code not in NON_FATAL_ERRORS

    def __str__(self) -> str:
        return f"{self.code} {self.description}" if self.description else self.code


class AuthError(ProtocolError):
    """nsqd refused AUTH (E_AUTH_FAILED, E_UNAUTHORIZED, ...) or needs a secret none was given."""


class ConnectError(NSQError):
    """nsqd could not be reached, or the connection failed before it was ready."""


class ConnectionClosedError(NSQError):
    """The connection to nsqd ended before the command was answered."""


class StoppedError(NSQError):
    """The Producer or Consumer has been stopped."""


class ConfigError(NSQError, ValueError):
    """An unknown option, or a value out of go-nsq's range for it."""
