"""S3 stores on Ceph RGW, which, unlike moto, checks every request's signature: wrong credentials on each client."""

from __future__ import annotations

import pytest

from datamount.storage import StorePermissionError, open_store
from tests.servers.ceph import CephServer

pytestmark = pytest.mark.ceph


@pytest.mark.parametrize("client", ["obstore", "s3fs"])
def test_refused_credentials_are_named_never_shown(ceph_server: CephServer, ceph_bucket: str, client: str) -> None:
    url, endpoint = f"s3://{ceph_bucket}/root", ceph_server.endpoint_url
    wrong_secret = "not-the-secret-of-this-key"
    for key, code in ((ceph_server.key, "SignatureDoesNotMatch"), ("AKIANOBODYHERE", "InvalidAccessKeyId")):
        with pytest.raises(StorePermissionError, match=rf"the S3 credentials were refused \({code}\)") as caught:
            open_store(url, endpoint_url=endpoint, key=key, secret=wrong_secret, client=client)
        assert wrong_secret not in str(caught.value)
        assert str(caught.value).startswith(f"cannot open {url}: ")
    store = open_store(url, endpoint_url=endpoint, key=ceph_server.key, secret=ceph_server.secret, client=client)
    store.write("obj", b"signed")
    assert store.read("obj") == b"signed"
