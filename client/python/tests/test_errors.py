"""libepk's one error table (shm/error_table.h) through the Python package: every error code raises its class, with
.code set, through the extension (epk.Client, epk.stored and the leases all raise through it): a checksum error, for
one, is DecodeError."""

import pytest

from epk import _epk, _errors


def test_every_code_raises_its_class_through_the_extension():
    rows = _epk._error_table()
    assert len(rows) == 12  # one per ErrorCode (codec/common/result.h)
    assert len({name for name, _, _ in rows}) == len(rows)
    for name, _status, cls in rows:
        klass = getattr(_errors, cls)
        assert issubclass(klass, _errors.Error)
        with pytest.raises(klass) as raised:
            _epk._raise_error(name, "the message")
        assert type(raised.value) is klass
        assert raised.value.code == name
        assert str(raised.value) == "the message"


def test_a_checksum_error_is_a_decode_error():
    with pytest.raises(_errors.DecodeError):
        _epk._raise_error("checksum", "model.epk: tensor 'w': checksum")


def test_an_unknown_code_is_refused_by_name():
    with pytest.raises(_errors.InvalidArgument, match="no error code 'nonsense'"):
        _epk._raise_error("nonsense", "x")
