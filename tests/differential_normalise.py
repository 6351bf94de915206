"""What legitimately differs between NSQ's Go daemons and ours, taken out of what they answer, so
that everything else can be compared byte for byte (tests/differential_driver.py runs the steps).

Answers become lists of text lines, one a fact, so a difference reads as a line diff:

* V2 frames: ``RESPONSE OK``, ``ERROR E_INVALID ...``, ``MESSAGE m0 attempts=1 body=b'..'``.
* JSON: parsed keeping every scalar's raw token (``"a\\u003cb"``, ``1``, ``1.0``, ``null``), then one
  line a scalar, ``path.to[0].key = <raw token>``, in the document's own key order; whether the
  text is compact is a line too. So key order, types, escaping and number formatting all count.
* Text: as it is, line by line, with the values below substituted.

What is substituted, and why it may differ:

* Message IDs: each daemon makes its own (time, node, sequence); they become ``m0``, ``m1``, ... in
  the order this side first received them, in frames and in error texts alike.
* Ports: each daemon listens on ephemeral ports and each test connection has its own local port;
  they become the names the driver gives them (``<nsqd-tcp>``, ``c1``, ...).
* The data directory: each daemon has its own (``/config/data_path``).
* Times: start times, connect times and lookupd's last_update are clocks, not behaviour; an integer
  in a plausible range becomes ``<time>`` (anything else is left, so a bad value still shows).
* The build: ``nsqd v1.3.0 (built w/go1.19.8)`` vs ``w/python3.11``.
* nsqd's ``memory`` block: Go reports its runtime's heap and GC, we report Python's under the same
  keys (README); keys and types are compared, values not.
* End-to-end latency percentile values: they measure the time between publish and FIN, which
  depends on the machine's load; quantiles and counts are compared.
* Durations in the text /stats (uptime, connected): clocks again.
* The TLS cipher suite: which one a handshake settles on is the TLS library's choice (Go's prefers
  AES-128-GCM, OpenSSL's AES-256-GCM), and NSQ v1.3 names no TLS 1.3 suite (``Unknown 4865``), so
  only its presence is compared (README).
* Go's map order: what Go keeps in maps comes out in random order, so it is sorted: the clients of
  a channel and nsqd's producers (by connection name), nsqlookupd's producers of a registration (by
  address), and nsqlookupd's lists of topic and channel names (a node's tombstone flags move with
  their topics).
"""

import re
import time

from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from common.message import decode_message

TIME_KEYS = {"start_time": 1, "connect_ts": 1, "last_update": 10**9, "tombstoned_at": 10**9}  # units a second
PLAUSIBLE_SECONDS = 24 * 3600  # a time this close to now is a clock reading, not a bug


class Names:
    """One side's real values and the names both sides share for them."""

    def __init__(self):
        self.ids: dict[bytes, str] = {}
        self.real_ids: dict[str, bytes] = {}
        self.ports: dict[int, str] = {}
        self.paths: dict[str, str] = {}  # e.g. the daemon's data directory -> "<data-path>"

    def message(self, msg_id: bytes) -> str:
        name = self.ids.get(msg_id)
        if name is None:
            name = self.ids[msg_id] = f"m{len(self.ids)}"
            self.real_ids[name] = msg_id
        return name

    def forget_messages(self) -> None:
        """The next message received is m0 again (each test names its own)."""
        self.ids.clear()
        self.real_ids.clear()

    def real_id(self, name: str) -> bytes:
        """The ID this side gave the message both call ``name`` (an unknown name stays itself,
        padded to an ID's 16 bytes, so the command still goes out and the daemon answers it)."""
        return self.real_ids.get(name, name.encode().ljust(16, b"_")[:16])

    def port(self, port: int) -> str | None:
        return self.ports.get(port)

    def text(self, data: str) -> str:
        """Message IDs and known ports in free text replaced by their names."""
        for msg_id, name in self.ids.items():
            data = data.replace(msg_id.decode("latin-1"), name)
        for path, name in self.paths.items():
            data = data.replace(path, name)
        return re.sub(r"(?<=[:_])(\d{2,5})\b", lambda m: self.ports.get(int(m.group(1)), m.group(1)), data)


# -- frames ------------------------------------------------------------------------------------


def frame_line(frame, names: Names) -> str:
    if frame.frame_type == FRAME_TYPE_MESSAGE:
        message = decode_message(frame.data)
        return f"MESSAGE {names.message(message.id)} attempts={message.attempts} body={message.body!r}"
    data = frame.data.decode("utf-8", "backslashreplace")
    if frame.frame_type == FRAME_TYPE_RESPONSE:
        if data.startswith("{"):
            return "RESPONSE " + " ".join(json_lines(data, names))
        return f"RESPONSE {names.text(data)}"
    if frame.frame_type == FRAME_TYPE_ERROR:
        return f"ERROR {names.text(data)}"
    return f"FRAME type={frame.frame_type} {data!r}"


# -- JSON with raw tokens ----------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(?P<punct>[{}\[\]:,])|(?P<string>"(?:[^"\\\x00-\x1f]|\\.)*")'
                    r"|(?P<number>-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<literal>true|false|null))")


class Raw(str):
    """A JSON scalar as it was written."""


class JSONSyntaxError(ValueError):
    pass


def parse_raw_json(text: str):
    """Objects as dicts (in their order), arrays as lists, scalars as their :class:`Raw` token."""
    tokens = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise JSONSyntaxError(f"bad JSON at {pos}: {text[pos:pos + 40]!r}")
        tokens.append(match.group(match.lastgroup))
        pos = match.end()
    value, end = _value(tokens, 0)
    if end != len(tokens):
        raise JSONSyntaxError("trailing data")
    return value


def _value(tokens: list[str], at: int):
    token = tokens[at]
    if token == "{":
        result, at = {}, at + 1
        while tokens[at] != "}":
            key = _decode_key(tokens[at])
            if tokens[at + 1] != ":":
                raise JSONSyntaxError("expected ':'")
            result[key], at = _value(tokens, at + 2)
            if tokens[at] == ",":
                at += 1
        return result, at + 1
    if token == "[":
        items, at = [], at + 1
        while tokens[at] != "]":
            item, at = _value(tokens, at)
            items.append(item)
            if tokens[at] == ",":
                at += 1
        return items, at + 1
    if token in "]}:,":
        raise JSONSyntaxError(f"unexpected {token!r}")
    return Raw(token), at + 1


def _decode_key(token: str) -> str:
    if not token.startswith('"'):
        raise JSONSyntaxError(f"bad key {token!r}")
    return token[1:-1]


def is_compact(text: str) -> bool:
    """No white space outside strings, not even a final newline (Go's json.Marshal)."""
    return not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text))


def json_lines(text: str, names: Names) -> list[str]:
    try:
        document = parse_raw_json(text)
    except (JSONSyntaxError, IndexError) as exc:
        return [f"not JSON ({exc}): {names.text(text)}"]
    lines = [] if is_compact(text) else ["(not compact)"]
    _flatten(normalise_json(document, names), "", lines)
    return lines


def _flatten(value, path: str, lines: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            lines.append(f"{path} = {{}}")
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else key, lines)
    elif isinstance(value, list):
        if not value:
            lines.append(f"{path} = []")
        for index, item in enumerate(value):
            _flatten(item, f"{path}[{index}]", lines)
    else:
        lines.append(f"{path} = {value}")


def normalise_json(value, names: Names, key: str = ""):
    if isinstance(value, dict):
        if key == "memory":
            return {name: Raw(f"<{_kind(item)}>") for name, item in value.items()}
        if isinstance(value.get("tombstones"), list) and isinstance(value.get("topics"), list):
            pairs = sorted(zip(value["topics"], value["tombstones"]))  # each flag stays with its topic
            value = {**value, "topics": [topic for topic, _ in pairs], "tombstones": [flag for _, flag in pairs]}
        return {name: normalise_json(item, names, name) for name, item in value.items()}
    if isinstance(value, list):
        items = [normalise_json(item, names, key) for item in value]
        if items and all(isinstance(item, dict) and ("remote_address" in item or "id" in item) for item in items):
            return sorted(items, key=lambda item: str(item.get("remote_address", item.get("id"))))
        if key in ("topics", "channels") and all(isinstance(item, Raw) for item in items):
            return sorted(items)
        return items
    return _scalar(value, key, names)


def _kind(raw: Raw) -> str:
    if raw.startswith('"'):
        return "string"
    if raw in ("true", "false"):
        return "bool"
    if raw == "null":
        return "null"
    return "float" if re.search(r"[.eE]", raw) else "int"


def _scalar(raw: Raw, key: str, names: Names) -> Raw:
    if key in TIME_KEYS and re.fullmatch(r"\d+", raw):
        per_second = TIME_KEYS[key]
        if abs(int(raw) / per_second - time.time()) < PLAUSIBLE_SECONDS:
            return Raw("<time>")
    if (key.endswith("_port") or not key) and re.fullmatch(r"\d+", raw) and names.port(int(raw)):
        return Raw(f"<{names.port(int(raw))}>")
    if key == "remote_address" and raw.startswith('"'):
        return Raw(names.text(raw))
    if key == "tls_cipher_suite" and raw != '""':
        return Raw("<cipher suite>")
    if key == "value" and re.fullmatch(r"\d+", raw):
        return Raw("<latency ns>")  # e2e percentile values: publish-to-FIN time, the machine's load
    if raw.startswith('"'):
        return Raw(names.text(raw))
    return raw


# -- text /stats --------------------------------------------------------------------------------

_CLIENT_LINE = re.compile(r"^(\s+)\[V2 (.*?):(\d+) (.*?)\s*\](.*)$")
_NAMED_CLIENT_LINE = re.compile(r"^\s+\[V2 ")


def stats_text_lines(text: str, names: Names) -> list[str]:
    """nsqd's plain-text /stats, line by line, clocks and ports named, client lines sorted."""
    lines = []
    in_memory = False
    for line in text.split("\n"):
        line = re.sub(r"^(nsqd v\S+) \(built w/\S+\)$", r"\1 (built w/<runtime>)", line)
        line = re.sub(r"^start_time \S+$", "start_time <time>", line)
        line = re.sub(r"^uptime \S+$", "uptime <duration>", line)
        if line == "Memory:":
            in_memory = True
        elif in_memory and not line.strip():
            in_memory = False
        elif in_memory:
            line = re.sub(r"\t\S+$", "\t<value>", line)
        line = re.sub(r"connected: \S+$", "connected: <duration>", line)
        line = re.sub(r"e2e%: .*$", lambda m: re.sub(r"\d+(\.\d+)?(ns|us|ms|s)", "<latency>", m.group(0)), line)
        match = _CLIENT_LINE.match(line)
        if match:
            indent, host, port, user_agent, rest = match.groups()
            line = f"{indent}[V2 {host}:{names.port(int(port)) or port} {user_agent}]{rest}"
        lines.append(line)
    return _sort_client_runs(lines)


def _sort_client_runs(lines: list[str]) -> list[str]:
    """Go lists a channel's clients (and the producers) in map order: sort each run of them."""
    result, run = [], []
    for line in lines:
        if _NAMED_CLIENT_LINE.match(line):
            run.append(line)
            continue
        result += sorted(run)
        run = []
        result.append(line)
    return result + sorted(run)


# -- HTTP -----------------------------------------------------------------------------------------

# Headers that differ by clock, or by how the body is framed: its length may change with the
# substitutions above (the HTTP client checks it against the body on each side), and Go's server
# sends an answer longer than its 2 KiB buffer chunked where ours gives its length.
VOLATILE_HEADERS = {"date", "content-length", "transfer-encoding"}


def http_lines(status: int, headers, body: bytes, names: Names, text_stats: bool = False) -> list[str]:
    lines = [f"status {status}"]
    lines += sorted(f"header {name.lower()}: {value}" for name, value in headers.items()
                    if name.lower() not in VOLATILE_HEADERS)
    text = body.decode("utf-8", "backslashreplace")
    if text_stats:
        return lines + ["body " + line for line in stats_text_lines(text, names)]
    if "json" in headers.get("content-type", "") or text.lstrip().startswith(("{", "[")):
        return lines + ["body " + line for line in json_lines(text, names)]
    return lines + ["body " + line for line in names.text(text).split("\n")]
