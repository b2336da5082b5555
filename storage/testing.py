"""The Store contract as a reusable test suite: mixin classes of pytest tests, for any backend.

Every built-in backend runs this suite (``tests/storage/test_contract.py``); a backend from another package
(registered through the ``datamount.backends`` entry point) runs the same tests by mixing the classes into a test
class of its own and providing a ``store`` fixture: a fresh, empty store of that backend for each test::

    class TestMyThingContract(StoreContractTests):
        @pytest.fixture
        def store(self):
            store = open_store(f"mything://test-bucket/{uuid.uuid4().hex}")
            yield store
            store.remove("", recursive=True, missing_ok=True)

The classes group the tests by concern (:class:`StoreReadWriteTests`, :class:`StoreBatchTests`,
:class:`StoreListingTests`, :class:`StoreCreateTests`, :class:`StorePathTests`), so a backend may also run some
of them only. :class:`StoreContractTests` is all of them. The fixture may be defined anywhere pytest finds it (the
class, the module, a ``conftest.py``) and may be parametrised.

This module imports pytest and hypothesis: it is imported only by test suites, never by ``datamount.storage``.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from datamount.storage.checksums import xxh3
from datamount.storage.errors import IntegrityError, ObjectExistsError, ObjectNotFoundError, UnsafePathError
from datamount.storage.store import CHECKED_IN_MEMORY, TEMP_PREFIX, Store

__all__ = [
    "ESCAPING_PATHS",
    "StoreBatchTests",
    "StoreContractTests",
    "StoreCreateTests",
    "StoreListingTests",
    "StorePathTests",
    "StoreReadWriteTests",
    "write_all",
]

#: Paths that every operation of every store refuses with :class:`~datamount.storage.UnsafePathError`.
ESCAPING_PATHS = [
    "../outside",
    "a/../../outside",
    "a/b/../../../outside",
    "..",
    "/etc/passwd",
    "//server/share",
    "s3://other-bucket/key",
    "file:///etc/passwd",
    "a\\..\\b",
    "~/secrets",
    "C:/windows",
    "a/\x00b",
]

_SAFE_NAME = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\\\x00"), min_size=1, max_size=12)


def _by_sha256(sha256: str) -> str:
    """Where :meth:`Store.put_many_by_content` puts bytes in these tests."""
    return f"objects/{sha256[:2]}/{sha256}"


def _local_files(tmp_path: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = tmp_path / f"src{i}.bin"
        path.write_bytes(f"file {i} ".encode() * (i + 1))
        paths.append(path)
    return paths


def write_all(store: Store, objects: dict[str, bytes]) -> None:
    """Write ``objects`` (their bytes by path) several at a time: a test's setup, when what it checks is how they read
    back, not the order they were written in (a store may take long to close each file: HDFS about half a second)."""
    with ThreadPoolExecutor(store.default_max_requests, thread_name_prefix="contract-setup") as pool:
        list(pool.map(store.write, objects, objects.values()))


class StoreReadWriteTests:
    """Whole-object writes and reads, ranges, streams, hashes and URLs."""

    def test_write_then_read_round_trips(self, store: Store) -> None:
        store.write("a.bin", b"\x00\x01payload")
        store.write("nested/deeper/b.txt", b"text")
        assert store.read("a.bin") == b"\x00\x01payload"
        assert store.read("nested/deeper/b.txt") == b"text"

    def test_write_replaces_whole_object(self, store: Store) -> None:
        store.write("obj", b"a much longer first version")
        store.write("obj", b"short")
        assert store.read("obj") == b"short"

    def test_write_accepts_memoryview_and_empty(self, store: Store) -> None:
        store.write("view", memoryview(b"abcdef")[2:4])
        store.write("empty", b"")
        assert store.read("view") == b"cd"
        assert store.read("empty") == b""
        assert store.list() == {"empty": 0, "view": 2}

    def test_read_missing_is_file_not_found(self, store: Store) -> None:
        with pytest.raises(FileNotFoundError) as caught:
            store.read("missing/object")
        assert isinstance(caught.value, ObjectNotFoundError)
        assert "missing/object" in str(caught.value)
        assert store.url in str(caught.value)

    @pytest.mark.parametrize(
        ("start", "end", "expected"),
        [(0, 4, b"0123"), (3, 7, b"3456"), (8, 10, b"89"), (8, 50, b"89"), (5, 5, b""), (0, 10, b"0123456789")],
        ids=["head", "middle", "tail", "past-end", "empty", "all"],
    )
    def test_read_range(self, store: Store, start: int, end: int, expected: bytes) -> None:
        store.write("digits", b"0123456789")
        assert store.read_range("digits", start, end) == expected
        assert bytes(store.read_range_buffer("digits", start, end)) == expected

    def test_read_range_buffer_of_a_missing_object_is_not_found(self, store: Store) -> None:
        with pytest.raises(ObjectNotFoundError, match="missing/object"):
            store.read_range_buffer("missing/object", 0, 4)

    def test_read_range_rejects_inverted_range(self, store: Store) -> None:
        store.write("digits", b"0123456789")
        with pytest.raises(ValueError, match="start <= end"):
            store.read_range("digits", 5, 2)

    def test_read_ranges_in_order(self, store: Store) -> None:
        data = bytes(range(256)) * 40
        store.write("blob", data)
        ranges = [(0, 10), (5000, 5100), (100, 100), (10_000, 20_000), (1, 2)]
        assert list(store.read_ranges("blob", ranges, max_requests=2)) == [data[a:b] for a, b in ranges]

    def test_open_streams_an_object(self, store: Store) -> None:
        store.write("stream", b"abc" * 1000)
        with store.open("stream") as stream:
            assert stream.read(3) == b"abc"
            assert len(stream.read()) == 2997
        with pytest.raises(ValueError, match="binary"):
            store.open("stream", "r")

    def test_local_path_is_where_the_bytes_are_or_none(self, store: Store) -> None:
        store.write("nested/obj", b"bytes on this machine")
        local = store.local_path("nested/obj")
        if store.local_path() is None:
            assert local is None
        else:
            assert local is not None and Path(local).read_bytes() == b"bytes on this machine"

    def test_sha256_streams_large_objects(self, store: Store) -> None:
        data = bytes(range(256)) * (9 * 4096 + 7)  # ~9.4 MB: more than two hashing chunks
        store.write("big", data)
        assert store.sha256("big") == hashlib.sha256(data).hexdigest()

    def test_sha256_of_missing_object(self, store: Store) -> None:
        with pytest.raises(ObjectNotFoundError):
            store.sha256("absent")

    def test_url_for_names_the_object(self, store: Store) -> None:
        assert store.url_for("a/b") == f"{store.url}/a/b"
        assert store.url_for("") == store.url


class StoreBatchTests:
    """Many objects at once: ``read_many``, ``put_file``, ``put_many`` and ``remove_many``."""

    def test_read_many_keeps_order_under_a_small_window(self, store: Store) -> None:
        blobs = {f"many/{i:03d}": bytes([i % 256]) * (i * 37 % 900 + 1) for i in range(60)}
        write_all(store, blobs)
        order = sorted(blobs, key=lambda p: -len(blobs[p]))
        sizes = [len(blobs[p]) for p in order]
        got = list(store.read_many(order, sizes=sizes, max_requests=5, max_bytes=2000))
        assert got == [blobs[p] for p in order]

    def test_read_many_gives_each_object_whole_whatever_size_it_was_told(self, store: Store) -> None:
        """Sizes are what the caller expects (a manifest's); an object of another size (damaged, replaced) still comes
        whole, for the caller's size check to name."""
        objects = {
            "told/right": (bytes(range(200)) * 5, 1000),
            "told/smaller": (b"0123456789", 3),
            "told/larger": (b"0123456789", 11),
            "told/one-more": (b"0123456789", 9),
            "told/empty-said-larger": (b"", 5),
            "told/unknown": (b"abc", 0),
        }
        for path, (data, _) in objects.items():
            store.write(path, data)
        got = store.read_many(list(objects), sizes=[told for _, told in objects.values()], max_requests=3)
        assert [bytes(data) for data in got] == [data for data, _ in objects.values()]

    def test_read_many_accepts_a_lazy_iterable_and_repeats(self, store: Store) -> None:
        store.write("x", b"X")
        store.write("y", b"Y")
        paths = (p for p in ["x", "y", "x", "x", "y"])
        assert b"".join(store.read_many(paths, max_requests=2)) == b"XYXXY"

    def test_read_many_of_nothing_yields_nothing(self, store: Store) -> None:
        assert list(store.read_many([])) == []

    def test_read_many_raises_at_the_missing_object_in_order(self, store: Store) -> None:
        for name in "abc":
            store.write(name, name.encode())
        results = store.read_many(["a", "b", "gone", "c"], max_requests=4)
        assert next(results) == b"a"
        assert next(results) == b"b"
        with pytest.raises(ObjectNotFoundError, match="gone"):
            next(results)

    def test_read_many_hashed_gives_each_objects_sha256_in_order(self, store: Store) -> None:
        blobs = {f"hashed/{i:03d}": bytes([i % 256]) * (i * 997 % 5000 + 1) for i in range(70)}
        write_all(store, blobs)
        order = [*sorted(blobs, reverse=True), "hashed/000"]
        got = list(store.read_many_hashed(order, sizes=[len(blobs[p]) for p in order]))
        assert got == [(blobs[p], hashlib.sha256(blobs[p]).hexdigest()) for p in order]
        results = store.read_many_hashed(["hashed/001", "gone"])
        assert next(results)[0] == blobs["hashed/001"]
        with pytest.raises(ObjectNotFoundError, match="gone"):
            next(results)

    def test_read_many_refuses_escaping_paths(self, store: Store) -> None:
        with pytest.raises(UnsafePathError):
            list(store.read_many(["../x"]))

    def test_read_many_abandoned_early_leaves_no_threads(self, store: Store) -> None:
        write_all(store, {f"obj{i}": b"z" * 1000 for i in range(40)})
        before = set(threading.enumerate())
        results = store.read_many([f"obj{i}" for i in range(40)], max_requests=8)
        assert next(results) == b"z" * 1000
        results.close()
        leaked = [t for t in threading.enumerate() if t not in before and t.name.startswith("datamount")]
        assert leaked == []

    def test_put_file_copies_a_local_file(self, store: Store, tmp_path: Path) -> None:
        (source,) = _local_files(tmp_path, 1)
        store.put_file(source, "in/copied.bin")
        assert store.read("in/copied.bin") == source.read_bytes()

    def test_put_many_copies_every_file_and_reports_progress(self, store: Store, tmp_path: Path) -> None:
        sources = _local_files(tmp_path, 25)
        done: list[tuple[str, int]] = []
        sent = store.put_many(
            [(src, f"up/{src.name}") for src in sources], max_requests=4, on_done=lambda p, n: done.append((p, n))
        )
        assert sent == sum(src.stat().st_size for src in sources)
        assert sorted(done) == sorted((f"up/{src.name}", src.stat().st_size) for src in sources)
        for src in sources:
            assert store.read(f"up/{src.name}") == src.read_bytes()

    def test_make_durable_keeps_what_was_written(self, store: Store, tmp_path: Path) -> None:
        sources = _local_files(tmp_path, 5)
        store.put_many([(src, f"durable/{i}/{src.name}") for i, src in enumerate(sources)])
        store.make_durable(f"durable/{i}/{src.name}" for i, src in enumerate(sources))
        store.make_durable([])
        assert [store.read(f"durable/{i}/{src.name}") for i, src in enumerate(sources)] == [
            src.read_bytes() for src in sources
        ]

    def test_put_of_a_missing_local_file_fails_and_stores_nothing(self, store: Store, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            store.put_file(tmp_path / "absent.bin", "target.bin")
        with pytest.raises(FileNotFoundError):
            store.put_many([(tmp_path / "absent.bin", "target2.bin")])
        assert store.list() == {}

    def test_put_many_checks_the_sha256_a_file_must_have(self, store: Store, tmp_path: Path) -> None:
        good, changed = _local_files(tmp_path, 2)
        right = hashlib.sha256(good.read_bytes()).hexdigest()
        stale = hashlib.sha256(b"what the file held when it was hashed").hexdigest()
        assert store.put_many([(good, "checked/good", right)]) == good.stat().st_size
        assert store.read("checked/good") == good.read_bytes()
        with pytest.raises(IntegrityError, match=r"src1\.bin changed while it was being uploaded"):
            store.put_many([(changed, "checked/changed", stale)])
        assert store.list("checked") == {"checked/good": good.stat().st_size}

    @pytest.mark.parametrize("size", [5_000, CHECKED_IN_MEMORY + 1], ids=["in-memory", "streamed"])
    def test_put_many_checks_the_xxh3_a_file_must_have_when_given(
        self, store: Store, tmp_path: Path, size: int
    ) -> None:
        """With an xxh3-64 given, that is what the copy checks (as cheap as the read), not the sha256."""
        good = tmp_path / "good.bin"
        good.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        data = good.read_bytes()
        sha256, right, stale = hashlib.sha256(data).hexdigest(), xxh3(data), xxh3(b"what the file held")
        assert store.put_many([(good, "fast/good", sha256, right)]) == size
        assert store.read("fast/good") == data
        with pytest.raises(IntegrityError, match=r"good\.bin changed while it was being uploaded: its xxh3-64 is now"):
            store.put_many([(good, "fast/changed", sha256, stale)])  # its sha256 right: the xxh3-64 is checked
        assert store.list("fast") == {"fast/good": size}

    #: Contents for :meth:`put_many_by_content`: empty, small, the same bytes twice, and larger than any read buffer.
    _BY_CONTENT: ClassVar[list[bytes]] = [
        b"",
        b"a",
        b"same bytes",
        b"same bytes",
        bytes(range(256)) * 400,
        b"\x07" * ((5 << 20) + 3),
    ]

    def test_put_many_by_content_names_each_file_by_its_bytes(self, store: Store, tmp_path: Path) -> None:
        """Each file goes under the name its sha256 gives, with its checksums and size, in order; bytes stored once
        (the second file of the same bytes is not written). Stores that cannot name an object after writing it say
        so."""
        sources = []
        for number, content in enumerate(self._BY_CONTENT):
            sources.append(tmp_path / f"content{number}.bin")
            sources[-1].write_bytes(content)
        files = [(str(source), source.stat().st_size) for source in sources]
        if not store.names_after_writing:
            with pytest.raises(NotImplementedError):
                list(store.put_many_by_content(files, _by_sha256, staging="objects"))
            return
        stored = list(store.put_many_by_content(files, _by_sha256, staging="objects", max_requests=2))
        expected = [(hashlib.sha256(c).hexdigest(), xxh3(c), len(c)) for c in self._BY_CONTENT]
        assert [(s.sha256, s.xxh3, s.size) for s in stored] == expected
        assert [s.path for s in stored] == [_by_sha256(sha256) for sha256, _, _ in expected]
        assert [s.written for s in stored] == [True, True, True, False, True, True]
        for done, content in zip(stored, self._BY_CONTENT, strict=True):
            assert store.read(done.path) == content
        assert store.list("objects") == {s.path: s.size for s in stored}
        assert not [p for p in store.fs.find(store.full_path("objects")) if TEMP_PREFIX in p]

    def test_put_many_by_content_writes_what_is_missing_only(self, store: Store, tmp_path: Path) -> None:
        """What ``present`` lists (or the store holds) at the right size is not written again; an object of the
        right name and the wrong size (a damaged one) is written over."""
        if not store.names_after_writing:
            pytest.skip(f"{type(store).__name__} does not name objects after writing them")
        kept, damaged, listed = (tmp_path / name for name in ("kept", "damaged", "listed"))
        for source in (kept, damaged, listed):
            source.write_bytes(f"the bytes of {source.name}".encode() * 50)
        files = [(str(source), source.stat().st_size) for source in (kept, damaged, listed)]
        (first,) = store.put_many_by_content(files[:1], _by_sha256, staging="objects")
        damaged_path = _by_sha256(hashlib.sha256(damaged.read_bytes()).hexdigest())
        listed_path = _by_sha256(hashlib.sha256(listed.read_bytes()).hexdigest())
        store.write(damaged_path, b"half of it")
        present = {listed_path: listed.stat().st_size}  # said to be there (it is not): trusted, so not written
        again = list(store.put_many_by_content(files, _by_sha256, staging="objects", present=present))
        assert [s.written for s in again] == [False, True, False]
        assert store.read(first.path) == kept.read_bytes()
        assert store.read(damaged_path) == damaged.read_bytes()
        assert not store.exists(listed_path)

    def test_put_many_by_content_of_a_missing_file_names_it_and_leaves_nothing(
        self, store: Store, tmp_path: Path
    ) -> None:
        if not store.names_after_writing:
            pytest.skip(f"{type(store).__name__} does not name objects after writing them")
        (present,) = _local_files(tmp_path, 1)
        absent = tmp_path / "absent.bin"
        files = [(str(present), present.stat().st_size), (str(absent), 10)]
        results = store.put_many_by_content(files, _by_sha256, staging="objects")
        assert next(results).written
        with pytest.raises(FileNotFoundError, match=r"absent\.bin"):
            next(results)
        assert list(store.list("objects").values()) == [present.stat().st_size]
        assert not [p for p in store.fs.find(store.full_path("objects")) if TEMP_PREFIX in p]

    def test_remove_many_removes_each_and_ignores_missing(self, store: Store) -> None:
        for name in ("a", "b/c", "d"):
            store.write(name, b"x")
        store.remove_many(["a", "b/c", "never-there"])
        store.remove_many([])
        assert store.list() == {"d": 1}


class StoreListingTests:
    """Listings, existence, metadata and removal."""

    def test_list_is_recursive_with_sizes(self, store: Store) -> None:
        store.write("top", b"1")
        store.write("dir/a", b"22")
        store.write("dir/sub/b", b"333")
        assert store.list() == {"dir/a": 2, "dir/sub/b": 3, "top": 1}
        assert store.list("dir") == {"dir/a": 2, "dir/sub/b": 3}
        assert store.list("dir/sub") == {"dir/sub/b": 3}

    def test_list_non_recursive_shows_direct_objects(self, store: Store) -> None:
        store.write("dir/a", b"22")
        store.write("dir/sub/b", b"333")
        assert store.list("dir", recursive=False) == {"dir/a": 2}

    def test_list_of_a_missing_prefix_is_empty(self, store: Store) -> None:
        assert store.list("nothing/here") == {}
        assert store.list("nothing/here", recursive=False) == {}

    def test_list_hides_objects_being_written(self, store: Store) -> None:
        store.write("real", b"r")
        store.fs.pipe_file(store.full_path(f"{TEMP_PREFIX}real.0123456789ab"), b"partial")
        assert store.list() == {"real": 1}

    def test_list_folders_shows_direct_subfolders(self, store: Store) -> None:
        store.write("top/a/x", b"1")
        store.write("top/b/c/y", b"2")
        store.write("top/file", b"3")
        assert store.list_folders("top") == ["top/a", "top/b"]
        assert store.list_folders("top/b") == ["top/b/c"]
        assert store.list_folders("top/a") == []
        assert store.list_folders("absent") == []

    def test_exists_and_info(self, store: Store) -> None:
        store.write("folder/obj", b"12345")
        assert store.exists("folder/obj")
        assert not store.exists("folder/none")
        info = store.info("folder/obj")
        assert (info.path, info.size, info.is_dir) == ("folder/obj", 5, False)
        with pytest.raises(ObjectNotFoundError):
            store.info("folder/none")

    def test_remove_one_object(self, store: Store) -> None:
        store.write("keep", b"k")
        store.write("drop", b"d")
        store.remove("drop")
        assert store.list() == {"keep": 1}

    def test_remove_recursive_takes_everything_below(self, store: Store) -> None:
        store.write("keep", b"k")
        for i in range(5):
            store.write(f"tree/{i}/leaf", b"x")
        store.remove("tree", recursive=True)
        assert store.list() == {"keep": 1}

    def test_remove_missing(self, store: Store) -> None:
        with pytest.raises(ObjectNotFoundError):
            store.remove("never-written")
        store.remove("never-written", missing_ok=True)


class StoreCreateTests:
    """``create`` writes only where nothing is: of writers creating one path at once, one succeeds."""

    def test_create_writes_a_new_object(self, store: Store) -> None:
        store.create("new/one.json", b"first")
        assert store.read("new/one.json") == b"first"

    def test_create_refuses_a_path_that_exists_and_leaves_it(self, store: Store) -> None:
        store.create("taken.json", b"first")
        with pytest.raises(ObjectExistsError):
            store.create("taken.json", b"second")
        store.write("written.json", b"by write")
        with pytest.raises(ObjectExistsError):
            store.create("written.json", b"second")
        assert store.read("taken.json") == b"first" and store.read("written.json") == b"by write"
        assert store.list() == {"taken.json": 5, "written.json": 8}

    def test_of_racing_creates_exactly_one_wins(self, store: Store) -> None:
        """Several rounds: a server that checks the condition and then writes, with nothing between, lets two
        writers win now and then (moto did, about one round in 40)."""
        if not store.exclusive_create:
            pytest.skip(f"{type(store).__name__} cannot make a create exclusive")
        writers, rounds = 6, 8
        clients = [pickle.loads(pickle.dumps(store)) for _ in range(writers)]  # each writer with a client of its own
        for contest in range(rounds):
            start = threading.Barrier(writers)
            outcomes: list[str] = [""] * writers

            def create(index: int, path: str, start: threading.Barrier, outcomes: list[str]) -> None:
                start.wait()
                try:
                    clients[index].create(path, f"writer {index}".encode())
                    outcomes[index] = "created"
                except ObjectExistsError:
                    outcomes[index] = "refused"

            path = f"contested-{contest}.json"
            threads = [threading.Thread(target=create, args=(index, path, start, outcomes)) for index in range(writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(outcomes) == ["created"] + ["refused"] * (writers - 1), f"round {contest}"
            assert store.read(path) == f"writer {outcomes.index('created')}".encode()

    def test_stale_temporaries_go_and_fresh_ones_stay(self, store: Store) -> None:
        store.write("kept/object", b"data")
        assert store.remove_stale_temporaries("kept", older_than=0) == 0
        assert store.remove_stale_temporaries("nothing-here", older_than=0) == 0
        assert store.list("kept") == {"kept/object": 4}


class StorePathTests:
    """No path leaves the store's root, whatever the operation."""

    @pytest.mark.parametrize("path", ESCAPING_PATHS, ids=repr)
    def test_every_operation_refuses_escaping_paths(self, store: Store, path: str, tmp_path: Path) -> None:
        local = tmp_path / "f"
        local.write_bytes(b"f")
        operations = [
            lambda: store.read(path),
            lambda: store.read_range(path, 0, 1),
            lambda: store.write(path, b"x"),
            lambda: store.create(path, b"x"),
            lambda: store.put_file(local, path),
            lambda: store.put_many([(local, path)]),
            lambda: store.make_durable([path]),
            lambda: store.list(path),
            lambda: store.exists(path),
            lambda: store.info(path),
            lambda: store.remove(path, recursive=True),
            lambda: store.sha256(path),
            lambda: store.open(path),
            lambda: store.local_path(path),
        ]
        for operation in operations:
            with pytest.raises(UnsafePathError):
                operation()
        assert store.list() == {}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(parts=st.lists(_SAFE_NAME, min_size=1, max_size=4))
    @example(parts=["."]).via("the root itself")
    @example(parts=[".", "x", ".."]).via("a climb")
    def test_paths_either_stay_inside_the_root_or_are_refused(self, store: Store, parts: list[str]) -> None:
        path = "/".join(parts)
        try:
            full = store.full_path(path)
        except UnsafePathError:
            # "." parts are dropped: a path of only those is the root itself, which is no object's path.
            assert ".." in parts or path.startswith("~") or ":" in path or set(parts) == {"."}
            return
        assert ".." not in parts
        assert full.startswith(store.root.rstrip("/") + "/")
        assert ".." not in full[len(store.root) :].split("/")


class StoreContractTests(StoreReadWriteTests, StoreBatchTests, StoreListingTests, StoreCreateTests, StorePathTests):
    """The whole Store contract: every test of the classes above."""
