"""Public datasets in a store's ``public/`` area: MNIST, IMDB, ImageNet and WMT14, installed once and read by name.

``install``, ``status``, ``remove`` and the registry are in :mod:`.install`; what a public dataset is
(:class:`PublicDataset`) in :mod:`.spec`; writing one into a store in :mod:`.writer`; reading one split in
:mod:`.splits`; downloads and archives in :mod:`.download` and :mod:`.archives`; and one module per dataset, each
with Paddle-compatible reader creators (``mnist.train()``...).
"""

from datamount.datasets.public import imagenet, imdb, mnist, wmt14
from datamount.datasets.public.download import RetryPolicy
from datamount.datasets.public.install import (
    MIRROR_ENV,
    InstallResult,
    PublicStatus,
    dataset_name,
    download_dir,
    file_urls,
    get,
    install,
    public_datasets,
    read_checksums,
    register,
    remove,
    status,
    unregister,
)
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.splits import SplitReader
from datamount.datasets.public.writer import PublicWriter

__all__ = [
    "MIRROR_ENV",
    "InstallResult",
    "PublicDataset",
    "PublicStatus",
    "PublicWriter",
    "RemoteFile",
    "RetryPolicy",
    "Sources",
    "SplitReader",
    "dataset_name",
    "download_dir",
    "file_urls",
    "get",
    "imagenet",
    "imdb",
    "install",
    "mnist",
    "public_datasets",
    "read_checksums",
    "register",
    "remove",
    "status",
    "unregister",
    "wmt14",
]
