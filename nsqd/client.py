"""One V2 client's state (nsqd/client_v2.go), without the socket: its connection's part
that commands and deliveries change.

Everything here is synchronous: commands change state and append frames to ``out``, and
tell the connection (nsqd/connection.py) through the two callables it gives: ``output_ready``
when ``out`` may need sending, ``earlier_deadline`` when a message in flight is due before
the connection's timeout task was going to wake. The connection sends ``out`` when the
flush policy says so: at once for responses and errors, and for messages when the client
cannot take more, when ``out`` reaches output_buffer_size, or output_buffer_timeout after
the first buffered byte. Times are trio's clock (the connection's backend's ``now``).
A command that makes room for messages (FIN, REQ, RDY) does not refill the client itself:
the connection calls ``refill`` once the commands of a read have all been applied, so that
"FIN <id>\nRDY 0\n" in one read gets no message in between, as nsqd's messagePump, which
sends only between its looks at the ready state, does not send one (it sees the RDY 0 first).
In-flight messages are kept in delivery order, which is deadline order because one client
has one msg_timeout; a TOUCH moves its message to the end. The rare TOUCH whose deadline is
capped by --max-msg-timeout is tracked apart in ``_capped``.
"""

import random
import struct
import time

import trio

from common.errors import ClientError, non_fatal
from common.frames import FRAME_HEAD, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT
from common.message import HEADER_LENGTH, TIMESTAMP_ATTEMPTS
from common.protocol_v2 import State

from .message import InFlight
from .options import DEFAULT_HEARTBEAT_INTERVAL

# A delivery is the frame head (size, type) and the queued message as it is, joined into
# ``out``, where the message's attempts are then raised by one.
_ATTEMPTS = struct.Struct(">H")
_FRAME_HEAD_SIZE = FRAME_HEAD.size
_ATTEMPTS_LOW = _FRAME_HEAD_SIZE + 9  # where the frame's low byte of attempts is, from its start


class Client:
    def __init__(self, client_id: int, opts, remote_address: str, output_ready, earlier_deadline):
        self.id = client_id
        self.opts = opts
        self.remote_address = remote_address
        remote_host = remote_address.rsplit(":", 1)[0].strip("[]")
        self.client_id = remote_host
        self.hostname = remote_host
        self.remote_ip = remote_host if ":" in remote_address else ""  # none for a unix socket
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self.output_buffer_size = 16 * 1024
        self.output_buffer_timeout = opts.output_buffer_timeout
        self.msg_timeout = opts.msg_timeout
        self.sample_rate = 0
        self.state = State.INIT
        self.identified = False
        self.tls = None  # nsqd.tls.TLSState once upgraded
        self.compression = ""  # "snappy" or "deflate" once upgraded
        self.auth_state = None  # nsqd.auth.AuthState after a successful AUTH
        self.auth_secret = b""
        self.channel = None
        self.ready_count = 0
        self.in_flight: dict[bytes, InFlight] = {}
        self._capped: dict[bytes, InFlight] = {}
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        self.out = bytearray()
        self.flush_now = False
        self.first_buffered_at = 0.0
        self.output_ready = output_ready
        self._earlier_deadline = earlier_deadline
        self._watched_deadline = float("inf")  # when the timeout task wakes next (it may find nothing due)
        self._refill_due = False  # commands made room for messages: ``refill`` delivers them

    def __repr__(self) -> str:
        return f"<Client {self.id} {self.remote_address}>"

    # -- IDENTIFY -----------------------------------------------------------------

    def identify(self, data: dict) -> None:
        """Apply an IDENTIFY body, bounded by the --max-* flags (client_v2.go Identify)."""
        opts = self.opts
        self.client_id = data["client_id"]
        self.hostname = data["hostname"]
        self.user_agent = data["user_agent"]
        heartbeat = data["heartbeat_interval"]
        if heartbeat == -1:
            self.heartbeat_interval = 0.0
        elif heartbeat != 0:
            if not 1000 <= heartbeat <= opts.max_heartbeat_interval * 1000:
                raise _bad_identify(f"heartbeat interval ({heartbeat}) is invalid")
            self.heartbeat_interval = heartbeat / 1000
        # the timeout first: an unbuffered client (size -1) then gets timeout 0 whatever it asked
        timeout = data["output_buffer_timeout"]
        if timeout == -1:
            self.output_buffer_timeout = 0.0
        elif timeout != 0:
            if not opts.min_output_buffer_timeout * 1000 <= timeout <= opts.max_output_buffer_timeout * 1000:
                raise _bad_identify(f"output buffer timeout ({timeout}) is invalid")
            self.output_buffer_timeout = timeout / 1000
        size = data["output_buffer_size"]
        if size == -1:
            self.output_buffer_size = 1
            self.output_buffer_timeout = 0.0
        elif size != 0:
            if not 64 <= size <= opts.max_output_buffer_size:
                raise _bad_identify(f"output buffer size ({size}) is invalid")
            self.output_buffer_size = size
        sample_rate = data["sample_rate"]
        if not 0 <= sample_rate <= 99:
            raise _bad_identify(f"sample rate ({sample_rate}) is invalid")
        self.sample_rate = sample_rate
        msg_timeout = data["msg_timeout"]
        if msg_timeout != 0:
            if not 1000 <= msg_timeout <= opts.max_msg_timeout * 1000:
                raise _bad_identify(f"msg timeout ({msg_timeout}) is invalid")
            self.msg_timeout = msg_timeout / 1000
        self.identified = True

    def set_auth_secret(self, secret: bytes) -> None:
        self.auth_secret = secret

    def set_auth_state(self, state) -> None:
        """The auth server's answer for ``auth_secret`` (nsqd.auth.AuthState)."""
        self.auth_state = state

    @property
    def authed(self) -> bool:
        """nsqd's HasAuthorizations: an AUTH answer that grants something."""
        return self.auth_state is not None and bool(self.auth_state.authorizations)

    def published(self, topic: str, count: int) -> None:
        """``count`` messages from this client went into ``topic`` (/stats' pub_counts)."""
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    # -- output ------------------------------------------------------------------

    def send_response(self, data: bytes) -> None:
        self._send_frame(FRAME_TYPE_RESPONSE, data)

    def send_error(self, err: ClientError) -> None:
        self._send_frame(FRAME_TYPE_ERROR, err.to_bytes())

    def send_heartbeat(self) -> None:
        self._send_frame(FRAME_TYPE_RESPONSE, HEARTBEAT)

    def _send_frame(self, frame_type: int, data: bytes) -> None:
        self.out += FRAME_HEAD.pack(len(data) + 4, frame_type)
        self.out += data
        self.flush_now = True
        self.output_ready()

    def take_output(self) -> bytearray:
        data, self.out = self.out, bytearray()
        self.flush_now = False
        return data

    def keep_unsent(self, data: bytes | bytearray, sent: int) -> None:
        """Taken output (or a frame sent straight) of which only ``sent`` bytes went: the rest
        goes first, and at once."""
        rest = bytearray(memoryview(data)[sent:])
        rest += self.out
        self.out = rest
        self.flush_now = True

    def discard_output(self) -> None:
        """The connection has ended: nothing more will be sent."""
        self.out = bytearray()

    def set_tls(self, tls) -> None:
        """The connection is TLS now (nsqd.tls.TLSState)."""
        self.tls = tls

    def set_compression(self, name: str) -> None:
        self.compression = name

    # -- delivery ----------------------------------------------------------------

    def can_take_message(self) -> bool:
        return len(self.in_flight) < self.ready_count and self.state == State.SUBSCRIBED

    def send_messages(self, messages, start: int = 0, end: int | None = None) -> int:
        """Deliver ``messages[start:end]`` in order while the client can take more; the index
        after the last one taken. The flush policy is applied once, after."""
        in_flight, out, ready_count = self.in_flight, self.out, self.ready_count
        if end is None:
            end = len(messages)
        if start >= end or len(in_flight) >= ready_count:
            return start
        now = trio.current_time()
        deadline = now + self.msg_timeout
        if deadline < self._watched_deadline:
            self._earlier_deadline()
        was_empty = not out
        room = ready_count - len(in_flight)
        if self.sample_rate or self.channel.screen is not None:
            taken, index = self._chosen(messages, start, end, room)
        else:
            index = min(end, start + room)
            taken = messages[start:index]
        frames: list[bytes] = []
        lows: list[int] = []  # where each frame's low byte of attempts lands in ``out``
        add, pack, in_flight_for, low = frames.append, FRAME_HEAD.pack, InFlight, len(out) + _ATTEMPTS_LOW
        for message in taken:
            size = len(message)
            in_flight[message[10:HEADER_LENGTH]] = in_flight_for(message, deadline, now)
            add(pack(size + 4, FRAME_TYPE_MESSAGE))
            add(message)
            lows.append(low)
            low += size + _FRAME_HEAD_SIZE
        out += b"".join(frames)
        for low in lows:
            attempts = out[low] + 1
            if attempts <= 0xFF:
                out[low] = attempts
            else:  # a carry into the high byte; 65535 wraps to 0, as Go's uint16 does
                _ATTEMPTS.pack_into(out, low - 1, ((out[low - 1] << 8) + attempts) & 0xFFFF)
        self.message_count += len(lows)
        if was_empty and out:
            self.first_buffered_at = now
            self.output_ready()
        if len(out) >= self.output_buffer_size or len(in_flight) >= ready_count:
            self.flush_now = True
            self.output_ready()
        return index

    def _chosen(self, messages, start: int, end: int, room: int) -> tuple[list[bytes], int]:
        """Up to ``room`` of ``messages[start:end]`` that pass the client's sample rate and the
        channel's screen (the others are skipped), and the index after the last one looked at."""
        sample_rate, screen = self.sample_rate, self.channel.screen
        check = screen.begin() if screen is not None else None  # beyond NSQ: nsqd/screen.py
        chosen: list[bytes] = []
        index = start
        while index < end and len(chosen) < room:
            message = messages[index]
            index += 1
            if sample_rate and random.randrange(100) > sample_rate:
                continue
            if check is not None and check(message):
                continue  # taken by a feature beyond NSQ instead
            chosen.append(message)
        if screen is not None:
            screen.end()
        return chosen, index

    def set_ready_count(self, count: int) -> None:
        self.ready_count = count
        if self.out and len(self.in_flight) >= count:
            # no longer ready: buffered messages go out now, as nsqd's messagePump flushes
            self.flush_now = True
            self.output_ready()
        self._refill_due = self.channel is not None

    def _pop_in_flight(self, msg_id: bytes, command: str, code: str) -> InFlight:
        msg = self.in_flight.pop(msg_id, None)
        if msg is None:
            owned_elsewhere = self.channel is not None and any(
                msg_id in other.in_flight for other in self.channel.clients.values() if other is not self)
            reason = "client does not own message" if owned_elsewhere else "ID not in flight"
            raise non_fatal(code, f"{command} {msg_id.decode('ascii', 'replace')} failed {reason}")
        self._capped.pop(msg_id, None)
        return msg

    def finish(self, msg_id: bytes) -> None:
        msg = self._pop_in_flight(msg_id, "FIN", "E_FIN_FAILED")
        self.finish_count += 1
        if self.channel.e2e_latency is not None:
            self.channel.e2e_latency.insert(TIMESTAMP_ATTEMPTS.unpack_from(msg.message)[0], time.time_ns())
        if self.channel.processing_time is not None:  # beyond NSQ: nsqd/processing_time.py
            self.channel.processing_time.finished(msg.delivered_at)
        self._refill_due = True

    def finish_many(self, ids: list[bytes]) -> int:
        """FIN ``ids`` in order up to the first one not in flight (left to ``finish`` to refuse);
        how many were finished."""
        in_flight, capped, latency = self.in_flight, self._capped, self.channel.e2e_latency
        processing = self.channel.processing_time
        # the clocks are read once for the run: its FINs came in one read
        finished_ns = time.time_ns() if latency is not None else 0
        now = processing.now() if processing is not None else 0.0
        done = 0
        for msg_id in ids:
            msg = in_flight.pop(msg_id, None)
            if msg is None:
                break
            if capped:
                capped.pop(msg_id, None)
            if latency is not None:
                latency.insert(TIMESTAMP_ATTEMPTS.unpack_from(msg.message)[0], finished_ns)
            if processing is not None:
                processing.finished(msg.delivered_at, now)
            done += 1
        self.finish_count += done
        if done:
            self._refill_due = True
        return done

    def requeue(self, msg_id: bytes, delay: float) -> None:
        msg = self._pop_in_flight(msg_id, "REQ", "E_REQ_FAILED")
        self.requeue_count += 1
        self.channel.requeue_message(msg.requeued(), delay)
        self._refill_due = True

    def refill(self) -> None:
        """After a read's commands: the messages its FINs, REQs and RDYs made room for."""
        if self._refill_due:
            self._refill_due = False
            self.channel.client_ready(self)

    def touch(self, msg_id: bytes) -> None:
        msg = self._pop_in_flight(msg_id, "TOUCH", "E_TOUCH_FAILED")
        deadline = trio.current_time() + self.msg_timeout
        cap = msg.delivered_at + self.opts.max_msg_timeout
        if deadline >= cap:
            deadline = cap
            self._capped[msg_id] = msg
            self._earlier_deadline()
        msg.extend(deadline)
        self.in_flight[msg_id] = msg

    def take_in_flight(self) -> list[InFlight]:
        """Give up every in-flight message (disconnect, channel emptied)."""
        held = list(self.in_flight.values())
        self.in_flight.clear()
        self._capped.clear()
        return held

    def next_deadline(self) -> float:
        """When the earliest in-flight message times out (inf if none)."""
        deadline = float("inf")
        for msg in self.in_flight.values():
            deadline = msg.deadline
            break
        for msg in self._capped.values():
            deadline = min(deadline, msg.deadline)
        return deadline

    def watch_next_deadline(self) -> float:
        """The connection's timeout task sleeps until this deadline, unless told of an earlier one."""
        self._watched_deadline = self.next_deadline()
        return self._watched_deadline

    def expire(self, now: float) -> int:
        """Requeue every in-flight message whose deadline has passed; how many."""
        expired: dict[bytes, InFlight] = {}
        for msg_id, msg in self.in_flight.items():
            if msg.deadline > now:
                break
            expired[msg_id] = msg
        for msg_id, msg in self._capped.items():
            if msg.deadline <= now:
                expired[msg_id] = msg
        if not expired:
            return 0
        channel = self.channel
        for msg_id, msg in expired.items():
            del self.in_flight[msg_id]
            self._capped.pop(msg_id, None)
            channel.timed_out(msg.requeued())
        channel.client_ready(self)
        return len(expired)

    def subscribe(self, channel) -> None:
        """SUB: deliveries come from ``channel`` (which has added this client) once RDY allows."""
        self.channel = channel
        self.state = State.SUBSCRIBED

    def start_close(self) -> None:
        """CLS: no more deliveries to this client; it may still FIN what it holds."""
        self.ready_count = 0
        self.state = State.CLOSING


def _bad_identify(reason: str) -> ClientError:
    return ClientError("E_BAD_BODY", f"IDENTIFY {reason}")
