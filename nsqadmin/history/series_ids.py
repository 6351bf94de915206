"""One 64-bit id per series (node, topic, channel) for the rollup job's shuffles and sorts.

Theory of operation. Spark shuffles and sorts every raw row by series to find each snapshot's
predecessor. Carrying three strings per row would double the bytes moved and make the sort
compare strings; a 64-bit hash does neither, but two series sharing one would be mixed up. So
the job reads the distinct series of the raw files it is about to roll up with pyarrow (three
dictionary-encoded columns: under a second for a day of a 2,200-series cluster), and picks the
first salt under which Spark's ``xxhash64(salt, node, topic, channel)`` tells them all apart
(for thousands of series, salt 0 but for a chance in 10^12). The hash is computed here too, the
way Spark computes it (standard XXH64, each column's value hashed with the previous hash as
seed), so choosing the salt starts no Spark job. The same small table later gives the
aggregated windows their names back.
"""

import struct
from itertools import count
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, functions as F

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


def spark_series_hash(salt: int, node: str, topic: str, channel: str) -> int:
    """What Spark's ``xxhash64(lit(salt), node, topic, channel)`` gives, as a signed 64-bit int."""
    result = xxh64(struct.pack("<i", salt), SPARK_HASH_SEED)
    for value in (node, topic, channel):
        result = xxh64(value.encode(), result)
    return result - (1 << 64) if result >> 63 else result


def series_names(paths: list[Path]) -> pa.Table:
    """The distinct (node, topic, channel) of the raw files' snapshots."""
    tables = []
    for path in paths:
        table = pq.read_table(path, columns=NAMES, read_dictionary=NAMES)
        table = table.filter(pc.is_valid(table["topic"])).group_by(NAMES).aggregate([])
        tables.append(table.cast(NAMES_SCHEMA))
    if not tables:
        return NAMES_SCHEMA.empty_table()
    return pa.concat_tables(tables).group_by(NAMES).aggregate([])


def series_id(salt: int) -> Column:
    return F.xxhash64(F.lit(salt), *NAMES)


def named_series(spark: SparkSession, names: pa.Table) -> tuple[DataFrame, int]:
    """(``sid`` and the names of every series, the salt of :func:`series_id` that tells them apart)."""
    rows = list(zip(*(names[name].to_pylist() for name in NAMES)))
    for salt in count():
        ids = [spark_series_hash(salt, *row) for row in rows]
        if len(set(ids)) == len(ids):
            named = [(sid, *row) for sid, row in zip(ids, rows)]
            return spark.createDataFrame(named, "sid long, node string, topic string, channel string"), salt
