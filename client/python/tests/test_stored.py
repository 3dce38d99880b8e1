"""epk.stored (client-side decode, in the package's extension): what can be checked without a GPU, against a real
`epkd --cpu`. The GPU cases (the bytes against epkd's) are in test_torch.py."""

import pytest

import epk
import epk.stored as stored
from conftest import Daemon

needs_decode = pytest.mark.skipif(not stored.available(),
                                  reason=f"the package was built without client-side decode: {stored.missing()}")


@needs_decode
def test_a_host_pool_has_no_tier_and_says_so(bins, model):
    d = Daemon(bins, model["epk"])
    try:
        with epk.Client(d.socket) as c:
            with pytest.raises(epk.Unsupported) as e:
                stored.StoredTier(c, "test", 0)
            assert "no compressed tier" in str(e.value) and "host pool" in str(e.value)
            with pytest.raises(epk.NotFound):
                stored.StoredTier(c, "no-such-model", 0)
            # The set-up used the client's own connection, which still serves.
            assert c.connected and any(m["name"] == "test" for m in c.models())
    finally:
        d.close()


@needs_decode
def test_only_an_open_client_sets_up_a_tier(bins, model):
    with pytest.raises(epk.InvalidArgument, match="expected an epk.Client"):
        stored.StoredTier("/run/epkd/epkd.sock", "test", 0)
    d = Daemon(bins, model["epk"])
    try:
        c = epk.Client(d.socket)
        c.close()
        with pytest.raises(epk.Closed):
            stored.StoredTier(c, "test", 0)
        with epk.Client(d.socket) as c2, pytest.raises(epk.InvalidArgument, match="device must be"):
            stored.StoredTier(c2, "test", -1)
    finally:
        d.close()


def test_the_build_says_whether_it_decodes_and_what_it_lacked():
    if stored.available():
        assert stored.missing() == "" and stored.StoredTier is epk._epk.StoredTier
    else:
        assert stored.missing().startswith("the package was built with")
        with pytest.raises(epk.Unsupported, match="no client-side decode: " + stored.missing()):
            stored.StoredTier(None, "m", 0)
