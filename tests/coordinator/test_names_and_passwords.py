"""Username rules (hostile input included), passwords that never print, scrypt hashes."""

from __future__ import annotations

import pytest

from core.coordinator import Password, ScryptParams, Username
from core.coordinator.errors import BadRequest
from core.coordinator.people.passwords import hash_password, needs_rehash, verify_password

FAST = ScryptParams(n=2**10)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("x" * 65, "at most 64 characters (got 65)"),
        ("x" * 10_000, "at most 64 characters"),
        ("alice'--", 'not "\'"'),
        ("a;DROP TABLE users", "letters, digits"),
        ('bob" OR "1"="1', "letters, digits"),
        ("%_wild%", "not '%'"),
        ("nul\x00byte", "not '\\x00'"),
        ("bell\x07", "not '\\x07'"),
        ("new\nline", "not '\\n'"),
        ("rtl\u202eevil", "not '\\u202e'"),
        ("zero\u200bwidth", "not '\\u200b'"),
        ("lone\ud800surrogate", "not '\\ud800'"),
        ("space here", "not ' '"),
        ("emoji\U0001f600", "not '\\U0001f600'"),
        ("\u09be-leading-mark", "not '\\u09be'"),
        (None, "must be a string"),
        (["alice"], "must be a string"),
    ],
)
def test_hostile_usernames_are_refused_with_a_short_reason(raw: object, reason: str) -> None:
    with pytest.raises(BadRequest) as refused:
        Username.parse(raw)
    assert reason in str(refused.value)
    assert len(str(refused.value)) < 200  # a 10,000-character name is not echoed back


def test_names_of_any_script_are_normalised_and_case_folded() -> None:
    # Bengali and Hindi names carry vowel signs, which are combining marks, not letters
    for name in (
        "alice",
        "Ada.Lovelace_1815",
        "józef-99",
        "Σωκράτης",
        "日本語",
        "x",
        "সাহানা",
        "दीपा",
    ):
        assert Username.parse(name).name == name
    decomposed = Username.parse("Jose\u0301")  # e + combining acute accent
    assert decomposed.name == "Jos\u00e9"
    assert decomposed.key == Username.parse("JOS\u00c9").key == "jos\u00e9"
    assert Username.parse("Straße").key == Username.parse("STRASSE").key
    assert Username.parse("x" * 64).name == "x" * 64


def test_a_password_never_shows_itself() -> None:
    secret = "hunter2-but-longer"
    password = Password.parse(secret)
    assert secret not in repr(password)
    assert secret not in str(password)
    assert secret not in f"{password} {[password]} {password!r}"
    for bad in ["short", "x" * 1025, 12345678, None]:
        with pytest.raises(BadRequest) as refused:
            Password.parse(bad)
        assert str(bad) not in str(refused.value) or bad is None


def test_scrypt_hashes_carry_their_parameters_and_check_in_constant_time() -> None:
    password = Password.parse("correct horse battery")
    stored = hash_password(password, FAST)
    scheme, n, r, p, salt, _ = stored.split("$")
    assert (scheme, n, r, p) == ("scrypt", "1024", "8", "1")
    assert len(salt) == 22  # 16 random bytes, unpadded base64
    assert "correct" not in stored
    assert verify_password(password, stored)
    assert not verify_password(Password.parse("correct horse battery!"), stored)
    assert hash_password(password, FAST) != stored  # a fresh salt every time
    # weaker parameters than the current ones ask for a re-hash at the next login
    assert needs_rehash(stored, ScryptParams())
    assert not needs_rehash(stored, FAST)
    # what is not one of our hashes never matches
    for broken in ["", "plain", "scrypt$3$8$1$AAAA$BBBB", "scrypt$1024$8$1$!!$??", "md5$x"]:
        assert not verify_password(password, broken)
        assert needs_rehash(broken, FAST)


def test_scrypt_parameters_are_checked() -> None:
    for bad in [{"n": 1000}, {"n": 2**21}, {"r": 0}, {"p": 65}]:
        with pytest.raises(ValueError, match="scrypt"):
            ScryptParams(**bad)  # type: ignore[arg-type]
