"""Installing public datasets: from a mirror on a real loopback HTTP server or from local files, into every store
backend; nothing visible after a failure; status and removal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, mnist, public, verify
from datamount.datasets.errors import (
    DatasetNotFoundError,
    DownloadError,
    InstallConflictError,
    PublicConfigError,
    SourceFormatError,
    SourceNotFoundError,
)
from datamount.datasets.progress import Progress
from datamount.datasets.public.download import RetryPolicy
from datamount.datasets.public.spec import Builder, PublicDataset, Sources
from datamount.datasets.public.writer import PublicWriter
from datamount.storage import IntegrityError, Store, open_store
from tests.datasets.http_files import FileServer
from tests.datasets.public_files import (
    MNIST_NAMES,
    MnistSource,
    make_imdb,
    make_mnist,
    md5,
    registered,
    serve,
    with_checksums_of,
)

FAST = RetryPolicy(attempts=3, backoff=0.0)
MNIST_FILES = [name for pair in MNIST_NAMES.values() for name in pair]


@pytest.fixture
def server() -> Iterator[FileServer]:
    with FileServer() as running:
        yield running


@pytest.fixture
def mnist_source(tmp_path: Path, server: FileServer) -> Iterator[MnistSource]:
    """Generated MNIST files, served by the mirror and registered with their md5s."""
    source = make_mnist(tmp_path / "mnist-files", train=120, test=40)
    serve(server, "mnist", source.folder)
    with registered(with_checksums_of("mnist", source.folder)):
        yield source


def nothing_installed(store: Store) -> bool:
    """Whether the store's public area holds no dataset (only the marks of removed versions, which keep their
    numbers taken)."""
    left = store.list("public")
    return not list(catalog.summaries(store)) and all(path.endswith(layout.REMOVED_SUFFIX) for path in left)


def test_install_from_a_mirror_on_every_store_then_again_is_a_no_op(
    store: Store, server: FileServer, mnist_source: MnistSource
) -> None:
    result = public.install("mnist", store=store, mirror=server.url, retry=FAST)
    assert result.created and result.splits == {"train": 120, "test": 40}
    assert result.manifest.name == "public/mnist" and result.manifest.rows == 160
    assert result.manifest.columns == ["image", "label"]
    assert sorted(request.path for request in server.requests) == sorted(f"mnist/{name}" for name in MNIST_FILES)

    again = public.install("mnist", store=store, mirror=server.url, retry=FAST)
    assert not again.created and again.manifest == result.manifest
    assert catalog.versions(store, "public/mnist") == [1]
    assert len(server.requests) == len(MNIST_FILES)

    samples = list(mnist.test(store=store)())
    assert len(samples) == 40 and samples[3][1] == int(mnist_source.labels["test"][3])
    assert verify(store, result.manifest).ok


def test_downloads_are_cached_for_the_next_store(tmp_path: Path, server: FileServer, mnist_source: MnistSource) -> None:
    public.install("mnist", store=str(tmp_path / "one"), mirror=server.url, retry=FAST)
    public.install("mnist", store=str(tmp_path / "two"), mirror=server.url, retry=FAST)
    assert len(server.requests) == len(MNIST_FILES)
    assert sorted(path.name for path in (public.download_dir() / "mnist").glob("*.gz")) == sorted(MNIST_FILES)


def test_the_mirror_can_come_from_the_environment(
    local_store: Store, server: FileServer, mnist_source: MnistSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(public.MIRROR_ENV, server.url + "/")
    assert public.install("mnist", store=local_store, retry=FAST).created


def test_a_checksum_mismatch_installs_nothing(
    local_store: Store, server: FileServer, mnist_source: MnistSource
) -> None:
    server.corrupt("mnist/t10k-images-idx3-ubyte.gz")
    with pytest.raises(IntegrityError, match=r"/mnist/t10k-images-idx3-ubyte.gz: the downloaded file's md5 is"):
        public.install("mnist", store=local_store, mirror=server.url, retry=FAST)
    assert nothing_installed(local_store)
    cached = {path.name for path in (public.download_dir() / "mnist").iterdir()}
    assert "t10k-images-idx3-ubyte.gz" not in cached and "t10k-images-idx3-ubyte.gz.part" not in cached


def test_a_download_cut_in_the_middle_is_resumed(
    local_store: Store, server: FileServer, mnist_source: MnistSource
) -> None:
    server.cut("mnist/train-images-idx3-ubyte.gz", after=20_000)
    public.install("mnist", store=local_store, mirror=server.url, retry=FAST)
    asked = [request.range for request in server.requests_for("mnist/train-images-idx3-ubyte.gz")]
    assert asked == [None, "bytes=20000-"]
    downloaded = public.download_dir() / "mnist" / "train-images-idx3-ubyte.gz"
    assert downloaded.read_bytes() == (mnist_source.folder / "train-images-idx3-ubyte.gz").read_bytes()


def test_a_server_error_installs_nothing(local_store: Store, server: FileServer, mnist_source: MnistSource) -> None:
    server.fail("mnist/train-labels-idx1-ubyte.gz", 500)
    with pytest.raises(DownloadError) as caught:
        public.install("mnist", store=local_store, mirror=server.url, retry=FAST)
    assert str(caught.value) == (
        f"could not download {server.url}/mnist/train-labels-idx1-ubyte.gz: HTTP 500 Internal Server Error "
        "(after 3 attempts)"
    )
    assert nothing_installed(local_store)


def test_a_mirror_must_be_an_http_url(local_store: Store, mnist_source: MnistSource) -> None:
    with pytest.raises(PublicConfigError, match=r"'ftp://mirror\.example' is not an http"):
        public.install("mnist", store=local_store, mirror="ftp://mirror.example")


def test_install_from_a_folder_checks_each_file(local_store: Store, mnist_source: MnistSource) -> None:
    result = public.install("mnist", store=local_store, source=mnist_source.folder)
    assert result.splits == {"train": 120, "test": 40}
    assert result.manifest.source == ", ".join(MNIST_FILES)


def test_a_damaged_local_file_installs_nothing(local_store: Store, mnist_source: MnistSource) -> None:
    damaged = mnist_source.folder / "t10k-labels-idx1-ubyte.gz"
    damaged.write_bytes(damaged.read_bytes()[:-3])
    with pytest.raises(
        IntegrityError, match=r"t10k-labels-idx1-ubyte\.gz: its md5 is .* damaged or is not the published"
    ):
        public.install("mnist", store=local_store, source=mnist_source.folder)
    assert nothing_installed(local_store)


def test_a_local_folder_without_a_file_is_named(local_store: Store, mnist_source: MnistSource) -> None:
    (mnist_source.folder / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(SourceNotFoundError, match=r"mnist-files holds no train-labels-idx1-ubyte\.gz"):
        public.install("mnist", store=local_store, source=mnist_source.folder)
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        public.install("mnist", store=local_store, source=mnist_source.folder / "missing")
    assert nothing_installed(local_store)


def test_files_in_paddles_cache_are_found_under_their_url_names(local_store: Store, tmp_path: Path) -> None:
    made = make_imdb(tmp_path / "made")
    cache = tmp_path / "paddle-cache" / "imdb"
    cache.mkdir(parents=True)
    made.path.rename(cache / "imdb%2FaclImdb_v1.tar.gz")  # the name paddle.dataset.common.download gives it
    with registered(public.get("imdb").with_checksums({"aclImdb_v1.tar.gz": md5(cache / "imdb%2FaclImdb_v1.tar.gz")})):
        assert public.install("imdb", store=local_store, source=cache).splits == {"train": 10, "test": 10}


def test_a_dataset_that_cannot_be_downloaded_needs_a_source(local_store: Store) -> None:
    with pytest.raises(SourceNotFoundError, match="imagenet cannot be downloaded; install it with --from PATH"):
        public.install("imagenet", store=local_store)


def _rows_then_failure(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    writer.start_split("train")
    for number in range(200):
        writer.add(f"row {number}", "a")
    raise SourceFormatError("the source ends too early")


def _rows(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    writer.start_split("train")
    for number in range(50):
        writer.add(f"row {number}", "a")


def small_spec(build: Builder) -> PublicDataset:
    return PublicDataset("tiny", "rows for tests", "text", ("text", "label"), ("train",), (), build, "a folder", True)


def test_a_failing_build_removes_what_it_wrote(local_store: Store, tmp_path: Path) -> None:
    with registered(small_spec(_rows_then_failure)), pytest.raises(SourceFormatError, match="ends too early"):
        public.install("tiny", store=local_store, source=tmp_path, shard_bytes=100, row_group_bytes=100)
    assert nothing_installed(local_store)


def _rows_then_removed_by_someone_else(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    writer.start_split("train")
    for number in range(100):
        writer.add(f"row {number}", "a")
    writer.store.remove("public/tiny", recursive=True)  # what another process's cleanup would do


def test_an_install_whose_files_vanish_commits_nothing(local_store: Store, tmp_path: Path) -> None:
    with (
        registered(small_spec(_rows_then_removed_by_someone_else)),
        pytest.raises(InstallConflictError, match=r"were removed while it ran .* run it again"),
    ):
        public.install("tiny", store=local_store, source=tmp_path, shard_bytes=100, row_group_bytes=100)
    assert nothing_installed(local_store)


class RacedBuild:
    """A build during which another install of the same dataset runs to its end."""

    def __init__(self, store: Store, source: Path) -> None:
        self.store, self.source, self.nested = store, source, False

    def __call__(self, sources: Sources, writer: PublicWriter, progress: Progress) -> None:
        writer.start_split("train")
        for number in range(100):
            writer.add(f"first {number}", "a")
        if not self.nested:
            self.nested = True
            public.install("tiny", store=self.store, source=self.source, shard_bytes=100, row_group_bytes=100)


def test_when_two_installs_race_the_first_to_commit_wins(local_store: Store, tmp_path: Path) -> None:
    with registered(small_spec(RacedBuild(local_store, tmp_path))):
        result = public.install("tiny", store=local_store, source=tmp_path, shard_bytes=100, row_group_bytes=100)
    assert not result.created  # the nested install committed first; this one kept it
    assert catalog.versions(local_store, "public/tiny") == [1]
    shards = sorted(f"public/tiny/{shard.path}" for shard in result.manifest.shards)
    assert sorted(local_store.list("public/tiny/packs")) == shards


KILLED_INSTALL = textwrap.dedent(
    """
    import sys, time
    from datamount.datasets import public
    from datamount.datasets.public.spec import PublicDataset

    def build(sources, writer, progress):
        writer.start_split("train")
        for number in range(300):
            writer.add(f"row {number}", "a")
        print("written", flush=True)
        time.sleep(60)

    public.register(PublicDataset("tiny", "t", "text", ("text", "label"), ("train",), (), build, "a folder", True))
    public.install("tiny", store=sys.argv[1], source=sys.argv[2], shard_bytes=100, row_group_bytes=100)
    """
)


def _install_in_a_process(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """An install of ``tiny`` into ``tmp_path/store`` in a process of its own, which says ``written`` once it wrote
    a shard and then waits; the process, the store's folder, and its TMPDIR (``tmp_path/scratch``)."""
    store_dir = tmp_path / "store"
    scratch = tmp_path / "scratch"  # a killed process cannot remove its temporary folder
    scratch.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_INSTALL, str(store_dir), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    return process, store_dir, scratch


def test_a_killed_install_leaves_nothing_visible_and_the_next_one_completes(tmp_path: Path) -> None:
    process, store_dir, _ = _install_in_a_process(tmp_path)
    try:
        assert process.stdout is not None and process.stdout.readline() == "written\n"
    finally:
        process.kill()
        process.wait(timeout=30)
    store = open_store(store_dir)
    assert len(store.list("public/tiny/packs")) > 1  # shards were written, and no manifest
    assert catalog.dataset_names(store) == []
    with pytest.raises(DatasetNotFoundError):
        catalog.resolve(store, "tiny")

    with registered(small_spec(_rows)):
        manifest = public.install("tiny", store=store, source=tmp_path, shard_bytes=100, row_group_bytes=100).manifest
    assert manifest.version == 1 and manifest.rows == 50
    assert sorted(store.list("public/tiny/packs")) == [f"public/tiny/{shard.path}" for shard in manifest.shards]


def test_an_install_stopped_by_sigterm_removes_its_shards_and_scratch_files(tmp_path: Path) -> None:
    """SIGTERM stops an install as Ctrl-C does: its draft shards and their local scratch files are removed before the
    process ends by SIGTERM (a killed install's are left for the next one to remove)."""
    process, store_dir, scratch = _install_in_a_process(tmp_path)
    try:
        assert process.stdout is not None and process.stdout.readline() == "written\n"
        assert os.listdir(scratch) != []  # the shard being written
        process.terminate()
        assert process.wait(timeout=60) == -signal.SIGTERM
    finally:
        process.kill()
        process.wait(timeout=30)
    store = open_store(store_dir)
    assert store.list("public/tiny") == {} and os.listdir(scratch) == []


def test_status_and_remove(local_store: Store, mnist_source: MnistSource) -> None:
    before = {found.spec.name: found for found in public.status(local_store)}
    assert sorted(before) == ["imagenet", "imdb", "mnist", "wmt14"]
    assert not any(found.installed for found in before.values())
    public.install("mnist", store=local_store, source=mnist_source.folder)
    after = {found.spec.name: found for found in public.status(local_store)}
    assert after["mnist"].installed and after["mnist"].splits == {"train": 120, "test": 40}
    assert public.remove("mnist", store=local_store) == [1]
    assert nothing_installed(local_store)
    with pytest.raises(DatasetNotFoundError, match="the public dataset mnist is not installed"):
        public.remove("mnist", store=local_store)


def test_unknown_names_are_listed() -> None:
    with pytest.raises(DatasetNotFoundError, match="no public dataset named 'mnsit'; datamount knows: imagenet, imdb"):
        public.get("mnsit")


def test_registering_checks_names_and_checksums(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="already registered"):
        public.register(public.get("mnist"))
    with pytest.raises(ValueError, match=r"mnist has no file named nothing\.gz"):
        public.get("mnist").with_checksums({"nothing.gz": "0" * 32})
