"""``nsqd.dat``: which topics and channels exist and which are paused (nsqd/nsqd.go).

Written as NSQ v1.3 writes it: Go's json.Marshal of its Metadata structs, so keys in field
order and an empty list as ``null``; ephemeral topics and channels left out:
``{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]},
{"name":"u","paused":true,"channels":null}],"version":"1.3.0"}``, atomically via a temp
file, fsync and rename.

The opt-in features beyond NSQ keep their per-topic and per-channel settings as extra keys
after NSQ's (``{"name":"t","paused":false,"channels":null,"msg_ttl":60000}``), and only
while a setting differs from its default: Go's encoding/json ignores keys its structs do
not name, so NSQ's nsqd reads the file as before (and drops them when it writes it). A
known extra key with a value that is not an integer >= 0 is skipped with a warning.
"""

import json
import logging
import os
import threading
from typing import NamedTuple

from common import VERSION
from common.names import is_valid_name

from .chunks import TOPICS_A_CHUNK, Chunks
from .diskqueue import write_atomically
from .slices import Steps, at_once, released_steps

log = logging.getLogger("nsqd")

METADATA_FILE = "nsqd.dat"


TOPIC_EXTRAS = ("msg_ttl", "max_queue_bytes")
CHANNEL_EXTRAS = ("max_attempts", "pace")


class ChannelMeta(NamedTuple):
    name: str
    paused: bool
    extras: dict = {}


class TopicMeta(NamedTuple):
    name: str
    paused: bool
    channels: tuple[ChannelMeta, ...]
    extras: dict = {}


def encode(topics: list[TopicMeta]) -> bytes:
    return b"".join(at_once(EncodedEntries().steps(topics)))


class EncodedEntries:
    """Each topic's nsqd.dat entry as last encoded, reused while the topic's metadata is unchanged.

    Every rewrite is of the whole document, for one new topic or one pause as for many changes,
    and json.dumps of an entry costs ~3 us: 0.6 ms of the event loop for 200 topics at each new
    topic, 30 ms (in slices) for 10,000. An entry is reused only if its snapshot equals the one
    it was encoded from, so nothing has to tell this cache what changed. What it keeps is tuples
    of strings, booleans and (mostly empty) dicts, which the cyclic collector soon stops tracking.
    """

    def __init__(self):
        self._by_name: dict[str, tuple[TopicMeta, str]] = {}

    def steps(self, topics: list[TopicMeta]) -> Steps[list[bytes]]:
        """``encode`` a topic at a time (nsqd/slices.py), as chunks of TOPICS_A_CHUNK topics, which
        joined are the bytes json.dumps gives the whole document: joining and encoding 1 MB at the
        end of the steps held the loop (the writer joins them, in its worker thread)."""
        previous, self._by_name = self._by_name, {}
        out = Chunks()
        out.add('{"topics":' + ("[" if topics else "null"))
        for number, topic in enumerate(topics):
            kept = previous.pop(topic.name, None)
            if kept is None or kept[0] != topic:
                kept = (topic, _entry_text(topic))
            self._by_name[topic.name] = kept
            out.add(("," if number else "") + kept[1])
            out.topic_done(number)
            yield
        out.add(("]" if topics else "") + f',"version":{json.dumps(VERSION)}}}')
        yield from released_steps(list(previous.values()), TOPICS_A_CHUNK)  # the topics gone since
        return out.done()


def _entry_text(topic: TopicMeta) -> str:
    entry = {"name": topic.name, "paused": topic.paused,
             "channels": [{"name": ch.name, "paused": ch.paused, **ch.extras} for ch in topic.channels] or None,
             **topic.extras}
    return json.dumps(entry, separators=(",", ":"))


def _extras(entry: dict, keys: tuple[str, ...], owner: str) -> dict:
    extras = {}
    for key in keys:
        value = entry.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 0:
            log.warning("skipping %s of %s: %r is not an integer >= 0", key, owner, value)
            continue
        extras[key] = value
    return extras


# NSQ's Metadata structs (nsqd/nsqd.go), as Go's encoding/json fills them: a key names a field
# whatever its case (the last such key wins), other keys are ignored, null leaves a string or
# bool as it was and a list empty, and a value of another type fails the whole file.
DOCUMENT_FIELDS = {"topics": list, "version": str}
TOPIC_FIELDS = {"name": str, "paused": bool, "channels": list}
CHANNEL_FIELDS = {"name": str, "paused": bool}
JSON_KINDS = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def _go_struct(value, fields: dict[str, type], where: str) -> dict:
    """The fields Go's json.Unmarshal would set from ``value`` (a decoded JSON value)."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise ValueError(f"cannot unmarshal {JSON_KINDS[type(value)]} into {where}")
    found = {}
    for key, item in value.items():
        field = key.lower()
        if field not in fields:
            continue
        if item is None:
            if fields[field] is list:
                found.pop(field, None)
            continue
        if type(item) is not fields[field]:
            raise ValueError(f"cannot unmarshal {JSON_KINDS[type(item)]} into {where}.{field}")
        found[field] = item
    return found


def decode(data: bytes) -> list[TopicMeta]:
    """Topics and channels from nsqd.dat, read as NSQ reads it; ValueError where NSQ fails. Invalid
    names are skipped with a warning, as nsqd does."""
    document = _go_struct(json.loads(data), DOCUMENT_FIELDS, "Metadata")
    parsed = []  # the whole file first: a value of the wrong type anywhere fails it all, as in NSQ
    for entry in document.get("topics", []):
        topic = _go_struct(entry, TOPIC_FIELDS, "TopicMetadata")
        channels = [(_go_struct(raw, CHANNEL_FIELDS, "ChannelMetadata"), raw) for raw in topic.get("channels", [])]
        parsed.append((topic, entry, channels))
    topics = []
    for topic, entry, channels in parsed:
        name = topic.get("name", "")
        if not is_valid_name(name):
            log.warning("skipping creation of invalid topic %s", name)
            continue
        valid = []
        for channel, raw in channels:
            channel_name = channel.get("name", "")
            if not is_valid_name(channel_name):
                log.warning("skipping creation of invalid channel %s", channel_name)
                continue
            valid.append(ChannelMeta(channel_name, channel.get("paused", False),
                                     _extras(raw, CHANNEL_EXTRAS, f"{name}:{channel_name}")))
        topics.append(TopicMeta(name, topic.get("paused", False), tuple(valid), _extras(entry, TOPIC_EXTRAS, name)))
    return topics


def load(data_path: str) -> list[TopicMeta]:
    """The saved topics, or none if there is no nsqd.dat yet. A corrupt file is an error."""
    path = os.path.join(data_path, METADATA_FILE)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    try:
        return decode(data)
    except ValueError as exc:
        raise ValueError(f"failed to load metadata - failed to parse metadata in {path} - {exc}") from exc


def save(data_path: str, data: bytes) -> None:
    write_atomically(os.path.join(data_path, METADATA_FILE), data)


class MetadataWriter:
    """Writes nsqd.dat from the event loop or a worker thread, newest snapshot winning.

    Snapshots are numbered when taken (on the event loop); a write of an older snapshot
    that reaches the lock after a newer one was written is skipped, so a pause saved
    before its HTTP answer is never overwritten by a background write taken earlier.
    """

    def __init__(self, data_path: str):
        self.data_path = data_path
        self._lock = threading.Lock()
        self._taken = 0
        self._written = 0

    def number(self) -> int:
        self._taken += 1
        return self._taken

    def write(self, number: int, data: bytes | list[bytes]) -> None:
        """``data``: the snapshot numbered ``number``, encoded (or its chunks: ``encode_steps``)."""
        with self._lock:
            if number < self._written:
                return
            save(self.data_path, b"".join(data) if isinstance(data, list) else data)
            self._written = number
