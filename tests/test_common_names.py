"""common/names.py: topic and channel names, ^[.a-zA-Z0-9_-]+(#ephemeral)?$, 1..64
(NSQ v1.3's internal/protocol/names.go)."""

import string

import pytest

from common.names import (
    EPHEMERAL_SUFFIX, MAX_NAME_LENGTH, is_ephemeral, is_valid_name,
)

ALLOWED = string.ascii_lowercase + string.ascii_uppercase + string.digits + "._-"


def test_constants():
    assert (EPHEMERAL_SUFFIX, MAX_NAME_LENGTH) == ("#ephemeral", 64)


@pytest.mark.parametrize("char", ALLOWED)
def test_every_allowed_character_alone(char):
    assert is_valid_name(char)
    assert is_valid_name(char + "#ephemeral")


def test_all_allowed_characters_together():
    assert len(ALLOWED) == 65  # one too many for a name
    assert is_valid_name(ALLOWED[:64]) and is_valid_name(ALLOWED[1:])
    assert not is_valid_name(ALLOWED)


def test_lengths_at_the_boundaries():
    assert not is_valid_name("")
    assert is_valid_name("a")
    assert is_valid_name("a" * 64)
    assert not is_valid_name("a" * 65)


def test_ephemeral_suffix_counts_in_the_length():
    assert is_valid_name("a" * 54 + "#ephemeral")
    assert len("a" * 54 + "#ephemeral") == 64
    assert not is_valid_name("a" * 55 + "#ephemeral")


@pytest.mark.parametrize("name", [
    " ", "a b", "a!", "a#", "#", "a/b", "a:b", "a*", "a@b", "a,b", "a+b", "a%", "a\\b", "a'", 'a"',
    "a\n", "a\r", "a\t", "\x00", "é", "aé", "日本", "a\u00a0",
    "#ephemeral", "a#ephemeralx", "a#ephemeral#ephemeral", "a#EPHEMERAL", "a#ephem", "a#ephemeral ",
    "a #ephemeral", "#ephemeral#ephemeral",
])
def test_rejected_names(name):
    assert not is_valid_name(name)


@pytest.mark.parametrize("name", ["test", "Topic.1_a-b", "...", "---", "___", "0", "t#ephemeral", "-#ephemeral"])
def test_accepted_names(name):
    assert is_valid_name(name)



@pytest.mark.parametrize("name, ephemeral", [
    ("a#ephemeral", True), ("#ephemeral", True), ("a", False), ("aephemeral", False),
    ("a#ephemeralx", False), ("a#EPHEMERAL", False),
])
def test_is_ephemeral(name, ephemeral):
    assert is_ephemeral(name) is ephemeral
