"""Profiles, the default store, and which backend serves which URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from datamount.storage import (
    BackendNotInstalledError,
    DatamountError,
    MountError,
    Store,
    StoreConfigError,
    default_store_path,
    load_config,
    open_store,
)
from datamount.storage.backends.local import LocalStore
from datamount.storage.backends.memory import MemoryStore
from datamount.storage.backends.s3 import S3Store
from datamount.storage.mounts import mount_of
from datamount.storage.redact import (
    forget_given_secrets,
    given_secrets,
    redact_options,
    redact_url,
    scrub,
    secret_values,
)
from datamount.storage.registry import store_class_for


def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "datamount.toml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("DATAMOUNT_CONFIG", str(path))
    return path


def test_with_nothing_configured_the_default_is_a_local_folder(isolated_environment: Path) -> None:
    store = open_store()
    assert isinstance(store, LocalStore)
    assert Path(store.root) == default_store_path()
    assert str(default_store_path()).startswith(str(isolated_environment / "data"))
    store.write("hello", b"world")
    assert (default_store_path() / "hello").read_bytes() == b"world"


def test_a_profile_is_opened_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, monkeypatch, f'[stores.team]\nurl = "{tmp_path / "team"}"\n')
    store = open_store("team")
    assert store.name == "team"
    assert Path(store.root) == tmp_path / "team"
    assert "'team'" in repr(store)


def test_datamount_store_selects_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(
        tmp_path,
        monkeypatch,
        f'default = "one"\n[stores.one]\nurl = "{tmp_path / "one"}"\n[stores.two]\nurl = "memory://two"\n',
    )
    assert Path(open_store().root) == tmp_path / "one"
    monkeypatch.setenv("DATAMOUNT_STORE", "two")
    assert isinstance(open_store(), MemoryStore)
    monkeypatch.setenv("DATAMOUNT_STORE", str(tmp_path / "by-url"))
    assert Path(open_store().root) == tmp_path / "by-url"


def test_explicit_options_override_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, monkeypatch, f'[stores.g]\nurl = "{tmp_path / "g"}"\nmount = "glusterfs"\n')
    with pytest.raises(MountError, match="glusterfs"):
        open_store("g")
    assert open_store("g", mount=mount_of(str(tmp_path)).fstype).name == "g"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[stores.x\nurl=1", "not valid TOML"),
        ('colour = "blue"\n', "unknown top-level key"),
        ("[stores.x]\npath = '/tmp'\n", r"\[stores.x\] needs a url"),
        ("[stores.'bad name']\nurl = '/tmp'\n", "may hold only letters"),
        ("default = 3\n", "'default' must be"),
    ],
    ids=["syntax", "unknown-key", "no-url", "bad-name", "bad-default"],
)
def test_a_wrong_config_file_is_named_with_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    path = write_config(tmp_path, monkeypatch, text)
    with pytest.raises(StoreConfigError, match=message) as caught:
        load_config()
    assert str(path) in str(caught.value)


def test_a_missing_config_named_by_the_environment_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAMOUNT_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(StoreConfigError, match=r"absent\.toml"):
        open_store()


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        ("file", LocalStore),
        ("memory", MemoryStore),
        ("s3", S3Store),
        ("s3a", S3Store),
        ("ftp", Store),
        ("http", Store),
        ("https", Store),
    ],
)
def test_protocols_map_to_store_classes(protocol: str, expected: type[Store]) -> None:
    assert store_class_for(protocol) is expected


def test_an_unknown_protocol_names_the_known_ones() -> None:
    with pytest.raises(StoreConfigError, match=r"unknown storage protocol 'nosuch'.*s3"):
        open_store("nosuch://bucket/x")


def test_a_protocol_whose_package_is_missing_says_what_to_install() -> None:
    pytest.importorskip("fsspec")
    try:
        import adlfs  # noqa: F401

        pytest.skip("adlfs is installed here")
    except ImportError:
        pass
    with pytest.raises(BackendNotInstalledError, match="adlfs"):
        open_store("abfs://container/path")


def test_the_install_exposes_only_the_datamount_namespace(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, json\n"
        "found = {}\n"
        "for name in ('storage', 'datasets', 'readers', 'cli'):\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    found[name] = spec.origin if spec else None\n"
        "import datamount.storage, datamount.datasets, datamount.readers, datamount.cli\n"
        "print(json.dumps(found))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    project_root = Path(__file__).resolve().parents[2]
    for name, origin in json.loads(result.stdout).items():
        # Another distribution's package of that name (Hugging Face's datasets) may be installed: not the project's.
        assert origin is None or Path(origin).parent != project_root / name, f"top-level {name!r} comes from {origin}"


TWO_PROFILES = '[stores.team]\nurl = "memory://team"\n[stores.scratch]\nurl = "memory://scratch"\n'


@pytest.mark.parametrize("source", ["argument", "environment", "default"])
def test_a_misspelt_profile_is_an_error_that_names_the_closest_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, monkeypatch, ('default = "teem"\n' if source == "default" else "") + TWO_PROFILES)
    if source == "environment":
        monkeypatch.setenv("DATAMOUNT_STORE", "teem")
    with pytest.raises(StoreConfigError, match="'teem'") as caught:
        open_store("teem" if source == "argument" else None)
    message = str(caught.value)
    assert "did you mean 'team'?" in message
    assert "scratch" in message and "./teem" in message
    assert not (tmp_path / "teem").exists()


def test_a_bare_word_with_no_profiles_says_none_are_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreConfigError, match="no profiles are configured") as caught:
        open_store("teem")
    assert "did you mean" not in str(caught.value)
    assert not (tmp_path / "teem").exists()


@pytest.mark.parametrize("spelling", ["./teem", "{tmp}/teem", "file://{tmp}/teem", "existing"])
def test_explicit_paths_and_existing_folders_stay_local_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, monkeypatch, TWO_PROFILES)
    (tmp_path / "existing").mkdir()
    store = open_store(spelling.format(tmp=tmp_path))
    assert isinstance(store, LocalStore)
    assert store.root == str(tmp_path / spelling.rsplit("/", 1)[-1])
    store.write("x", b"1")  # a new folder is made by the first write
    assert (Path(store.root) / "x").read_bytes() == b"1"


def test_userinfo_in_an_endpoint_url_never_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(
        tmp_path, monkeypatch, '[stores.rgw]\nurl = "s3://b/p"\nendpoint_url = "http://user:secret@127.0.0.1:9/"\n'
    )
    store = open_store("rgw", check=False)
    with pytest.raises(DatamountError) as caught:
        open_store("rgw")
    with pytest.raises(StoreConfigError) as unknown:
        open_store("nosuch://user:secret@host/x")
    for text in (repr(store), store.endpoint, str(caught.value), str(unknown.value)):
        assert "secret" not in text and "user:" not in text, text


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@127.0.0.1:9/",
        "http://user:secret@host:notaport/",
        "s3://user:secret@bucket/key",
        "http://user@host/",
        "http://:secret@host/",
    ],
    ids=["host-port", "bad-port", "s3", "user-only", "password-only"],
)
def test_redact_url_masks_every_kind_of_userinfo(url: str) -> None:
    masked = redact_url(url)
    assert "secret" not in masked and "user" not in masked
    assert masked.startswith(url.split("://")[0] + "://***@")


def test_options_and_third_party_messages_lose_userinfo() -> None:
    options = {"endpoint_url": "http://user:secret@127.0.0.1:9/", "client_kwargs": {"proxy": "http://u:pw-123@p:3128"}}
    assert redact_options(options) == {
        "endpoint_url": "http://***@127.0.0.1:9/",
        "client_kwargs": {"proxy": "http://***@p:3128"},
    }
    message = 'Could not connect to the endpoint URL: "http://user:secret@127.0.0.1:9/b?list-type=2"'
    assert (
        scrub(message, secret_values(options))
        == 'Could not connect to the endpoint URL: "http://***@127.0.0.1:9/b?list-type=2"'
    )


def test_the_secrets_of_every_store_opened_are_given_for_scrubbing_what_quotes_them_alone() -> None:
    """A backend's message may quote a password without its URL, percent-decoded, or a secret key."""
    forget_given_secrets()
    endpoint = "http://alice:pass%21word@127.0.0.1:9"
    open_store("s3://bucket/p", check=False, endpoint_url=endpoint, key="AKIAGIVENKEY", secret="given-secret-key")
    message = "auth failed for alice with pass!word (pass%21word), key AKIAGIVENKEY, secret given-secret-key"
    assert scrub(message, given_secrets()) == "auth failed for alice with *** (***), key ***, secret ***"
    assert scrub(message) == message  # a store's own messages are scrubbed with its own secrets only
    forget_given_secrets()
    assert given_secrets() == []


SECRET_NAMES = [
    "key",
    "secret",
    "token",
    "aws_secret_access_key",
    "secretAccessKey",
    "X-Amz-Signature",
    "sig",
    "client_secret",
    "accountkey",
    "session_token",
    "Authorization",
    "sas",
]
PLAIN_NAMES = [
    "endpoint_url",
    "region_name",
    "profile",
    "anon",
    "path_style",
    "keytab",
    "kerb_ticket",
    "host",
    "port",
    "user",
    "replication",
    "connect_timeout",
    "hadoop.security.authentication",
    "X-Amz-Expires",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_secret_is_masked_under_its_name_in_options_urls_and_messages(name: str) -> None:
    value = "value-0f-a-secret"
    assert redact_options({name: value, "client_kwargs": {name: value}}) == {
        name: "***",
        "client_kwargs": {name: "***"},
    }
    assert redact_url(f"https://host/b/o?a=1&{name}={value}#x") == f"https://host/b/o?a=1&{name}=***#x"
    assert scrub(f"the server said {value!r}", secret_values({name: value})) == "the server said '***'"


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_options_that_hold_no_secret_stay_readable(name: str) -> None:
    assert redact_options({name: "shown-value"}) == {name: "shown-value"}
    assert redact_url(f"https://host/b?{name}=shown-value") == f"https://host/b?{name}=shown-value"
    assert secret_values({name: "shown-value"}) == []


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:9/data?sig=never-shown&x=1", "http://127.0.0.1:9/data#never-shown", "https://h/d?"]
)
def test_an_http_store_url_with_a_query_or_fragment_is_refused(url: str) -> None:
    """Each file's name is joined after the store's URL: a query would put it inside the query, reading one object
    for every name."""
    with pytest.raises(StoreConfigError, match="a store URL names a folder") as caught:
        open_store(url, check=False)
    assert "never-shown" not in str(caught.value)


@pytest.mark.parametrize("target", [5, b"/data/store", ["s3://bucket"]], ids=["int", "bytes", "list"])
def test_a_store_of_another_type_is_named(target: object) -> None:
    with pytest.raises(TypeError, match="a store is a Store, a URL, a path or a profile's name, not "):
        open_store(target)  # type: ignore[arg-type]
