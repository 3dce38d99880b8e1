"""epk.stored (client-side decode through libepk's C ABI): what can be checked without a GPU. libepk.so.2 comes from
$EPK_LIBEPK, else the build folder's client/; the GPU cases (the bytes against epkd's) are in test_torch.py."""

import os
import subprocess
import sys

import pytest

import epk
import epk.stored as stored
from conftest import Daemon, _build_dir


@pytest.fixture(scope="module", autouse=True)
def libepk():
    path = os.environ.get("EPK_LIBEPK") or str(_build_dir() / "client" / "libepk.so.2")
    if not os.path.isfile(path):
        pytest.fail(f"libepk.so.2 not found at {path}: build the repository first (scripts/build.sh)")
    os.environ["EPK_LIBEPK"] = path
    yield path


def test_a_host_pool_has_no_tier_and_says_so(bins, model):
    d = Daemon(bins, model["epk"])
    try:
        assert stored.available()
        with pytest.raises(epk.Unsupported) as e:
            stored.StoredTier(d.socket, "test", 0)
        assert "no compressed tier" in str(e.value) and "host pool" in str(e.value)
        with pytest.raises(epk.NotFound):
            stored.StoredTier(d.socket, "no-such-model", 0)
    finally:
        d.close()


def test_no_daemon_is_a_connection_error(tmp_path):
    with pytest.raises(epk.Unavailable) as e:  # as epk.Client raises it
        stored.StoredTier(str(tmp_path / "none.sock"), "test", 0)
    assert "connect" in str(e.value)


def test_a_missing_library_is_unsupported_naming_it(tmp_path):
    # A fresh interpreter: the library is loaded once per process.
    code = ("import epk, epk.stored as s\n"
            "try:\n    s.StoredTier('/nonexistent.sock', 'm', 0)\n"
            "except epk.Unsupported as e:\n    print('UNSUPPORTED', e)\n")
    env = dict(os.environ, EPK_LIBEPK=str(tmp_path / "libepk.so.2"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "UNSUPPORTED" in r.stdout and "libepk.so.2" in r.stdout, r.stdout + r.stderr
