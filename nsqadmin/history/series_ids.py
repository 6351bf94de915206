"""One 64-bit key per rollup window's names (node, topic, channel) for the rollup job's shuffles,
sorts and aggregations.

Theory of operation. Spark shuffles and sorts every raw row by series to find each snapshot's
predecessor, and then groups each minute's rows by series and, for the sum across nodes, by
(topic, channel). Carrying three strings per row would double the bytes moved and make every
sort and hash compare strings; a 64-bit hash does neither, but two names sharing one would be
mixed up. So the job reads the distinct series of the files it is about to roll up with pyarrow
(three dictionary-encoded columns: under a second for a day of a 2,200-series cluster), and
picks the first salt under which Spark's ``xxhash64(salt, node, topic, channel)`` tells apart
every series and every (ALL_NODES, topic, channel) of them (for thousands of names, salt 0 but
for a chance in 10^12). The hash is computed here too, the way Spark computes it (standard
XXH64, each column's value hashed with the previous hash as seed), so choosing the salt starts
no Spark job. The same small table, sent to Spark as Arrow (no Python worker), gives each
series the key of its ALL_NODES row and the aggregated windows their names back, and on the
driver the look-back's last snapshots their keys (look_back.py).
"""

import struct
from functools import lru_cache
from itertools import count
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, functions as F

from .layout import ALL_NODES

NAMES = ["node", "topic", "channel"]
NAMES_SCHEMA = pa.schema([(name, pa.string()) for name in NAMES])
SPARK_HASH_SEED = 42  # what Spark's xxhash64() starts from

_MASK = (1 << 64) - 1
_PRIME1, _PRIME2, _PRIME3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_PRIME4, _PRIME5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _round(accumulator: int, lane: int) -> int:
    return _rotl((accumulator + lane * _PRIME2) & _MASK, 31) * _PRIME1 & _MASK


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (unsigned), as Spark's XXH64.hashUnsafeBytes and hashInt compute it."""
    length, offset = len(data), 0
    if length >= 32:
        lanes = [(seed + _PRIME1 + _PRIME2) & _MASK, (seed + _PRIME2) & _MASK, seed & _MASK, (seed - _PRIME1) & _MASK]
        while offset <= length - 32:
            words = struct.unpack_from("<4Q", data, offset)
            lanes = [_round(lane, word) for lane, word in zip(lanes, words)]
            offset += 32
        result = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _MASK
        for lane in lanes:
            result = ((result ^ _round(0, lane)) * _PRIME1 + _PRIME4) & _MASK
    else:
        result = (seed + _PRIME5) & _MASK
    result = (result + length) & _MASK
    while offset <= length - 8:
        result ^= _round(0, struct.unpack_from("<Q", data, offset)[0])
        result = (_rotl(result, 27) * _PRIME1 + _PRIME4) & _MASK
        offset += 8
    if offset <= length - 4:
        result ^= struct.unpack_from("<I", data, offset)[0] * _PRIME1 & _MASK
        result = (_rotl(result, 23) * _PRIME2 + _PRIME3) & _MASK
        offset += 4
    for byte in data[offset:]:
        result ^= byte * _PRIME5 & _MASK
        result = _rotl(result, 11) * _PRIME1 & _MASK
    result ^= result >> 33
    result = result * _PRIME2 & _MASK
    result ^= result >> 29
    result = result * _PRIME3 & _MASK
    return result ^ (result >> 32)


# A warm worker's runs see the same series again and again: remember their keys (~100 bytes each).
@lru_cache(maxsize=1 << 16)
def spark_series_hash(salt: int, node: str, topic: str, channel: str) -> int:
    """What Spark's ``xxhash64(lit(salt), node, topic, channel)`` gives, as a signed 64-bit int."""
    result = xxh64(struct.pack("<i", salt), SPARK_HASH_SEED)
    for value in (node, topic, channel):
        result = xxh64(value.encode(), result)
    return result - (1 << 64) if result >> 63 else result


def series_names(paths: list[Path]) -> pa.Table:
    """The distinct (node, topic, channel) of the files' rows: raw snapshots or rollup windows."""
    tables = []
    for path in paths:
        table = pq.read_table(path, columns=NAMES, read_dictionary=NAMES).unify_dictionaries()
        table = table.filter(pc.is_valid(table["topic"])).group_by(NAMES).aggregate([])
        tables.append(table.cast(NAMES_SCHEMA))
    if not tables:
        return NAMES_SCHEMA.empty_table()
    return pa.concat_tables(tables).group_by(NAMES).aggregate([])


def window_key(salt: int, node: Column | str = "node") -> Column:
    """The key of a row's window: of its series, or with ``node`` ALL_NODES of the sum across nodes."""
    return F.xxhash64(F.lit(salt), node, "topic", "channel")


def named_keys(names: pa.Table) -> tuple[pa.Table, int]:
    """(``key``, ``all_key``, node, topic, channel for every series and every (ALL_NODES, topic,
    channel) of them, with ``all_key`` the key of the ALL_NODES row of the same topic and channel;
    the salt of :func:`window_key` that tells them apart)."""
    series = [row for row in zip(*(names[name].to_pylist() for name in NAMES)) if row[0] != ALL_NODES]
    sums = sorted({(ALL_NODES, topic, channel) for _, topic, channel in series})
    rows = series + sums
    for salt in count():
        keys = dict(zip(rows, (spark_series_hash(salt, *row) for row in rows)))
        if len(set(keys.values())) == len(rows):
            return _keys_table(rows, keys), salt


def _keys_table(rows: list[tuple[str, str, str]], keys: dict[tuple[str, str, str], int]) -> pa.Table:
    return pa.table({
        "key": pa.array([keys[row] for row in rows], pa.int64()),
        "all_key": pa.array([keys[(ALL_NODES, topic, channel)] for _, topic, channel in rows], pa.int64()),
        **{name: pa.array([row[index] for row in rows], pa.string()) for index, name in enumerate(NAMES)},
    })
