"""libepk's one error table (shm/error_table.h) through the Python package: every error code raises its class, with
.code set, through the extension, and the C ABI status of that code maps to the same class in epk.stored's ctypes
path: a checksum error, for one, is DecodeError through both."""

import pytest

from epk import _epk, _errors, stored


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


def test_each_c_status_names_the_class_of_every_code_it_carries():
    for name, status, cls in _epk._error_table():
        assert stored._CODES[status] is getattr(_errors, cls), name


def test_a_checksum_error_is_a_decode_error_through_both_bindings():
    with pytest.raises(_errors.DecodeError):
        _epk._raise_error("checksum", "model.epk: tensor 'w': checksum")
    status = {name: s for name, s, _ in _epk._error_table()}["checksum"]
    assert stored._CODES[status] is _errors.DecodeError


def test_an_unknown_code_is_refused_by_name():
    with pytest.raises(_errors.InvalidArgument, match="no error code 'nonsense'"):
        _epk._raise_error("nonsense", "x")
