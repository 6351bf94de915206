"""Output made while nsqd works through one receive of commands is sent when that work is done.

Theory of operation: a receive may hold hundreds of commands (FINs, PUBs) and each one
may give some client output (an OK, messages freed by a FIN, messages a PUB delivers to
consumers on other connections). Waking each client's writer task for every piece costs
more than the piece. So while a batch is open (a round of the fast path's poller, one read of
a portable connection, a round of heartbeats), a connection whose output is ready to go is
only noted (nsqd/connection.py: once per batch); when the batch ends, each noted connection
sends what its flush policy (nsqd/client.py) says must go now, from the same task, once.
Output made outside a batch (timeouts, HTTP publishes, deferred messages) wakes the writer
at once. The batch never spans an await: whoever opened it ends it first.
"""


class OutputBatch:
    def __init__(self):
        self.open = False
        self._noted: list = []

    def begin(self) -> None:
        self.open = True

    def note(self, connection) -> None:
        """``connection`` has output for when the batch ends (it notes itself once a batch)."""
        self._noted.append(connection)

    def end(self) -> None:
        self.open = False
        noted, self._noted = self._noted, []
        for connection in noted:
            connection.send_noted_output()
