"""``datamount --version``, ``stores`` and ``doctor`` through click's runner and as a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from tests.servers.moto import S3Server


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def use_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    """Write ``text`` as the configuration file in force."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    monkeypatch.setenv("DATAMOUNT_CONFIG", str(config))
    return config


def test_version() -> None:
    code, output = run("--version")
    assert code == 0
    assert output.startswith("datamount, version ")


def test_stores_shows_the_embedded_default() -> None:
    code, output = run("stores")
    assert code == 0
    assert "embedded default" in output
    assert "[stores.NAME]" in output


def test_a_long_path_stays_on_its_line_in_a_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Printed to a pipe (here, the runner's capture), a line is not wrapped at 80 columns: a path stays whole."""
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4)
    folder.mkdir()
    config = use_config(folder, monkeypatch, "")
    code, output = run("stores")
    assert code == 0
    assert f"config file: {config}\n" in output, output


def test_stores_lists_profiles_without_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_config(
        tmp_path,
        monkeypatch,
        'default = "team"\n[stores.team]\nurl = "s3://bucket/p"\nsecret = "never-printed-secret"\nkey = "AKIAX"\n'
        '[stores.scratch]\nurl = "memory://scratch"\n',
    )
    code, output = run("stores")
    assert code == 0
    assert "team" in output and "scratch" in output and "s3://bucket/p" in output
    assert "never-printed-secret" not in output and "AKIAX" not in output


def test_doctor_on_the_default_store_passes() -> None:
    code, output = run("doctor", "--quick")
    assert code == 0, output
    for check in ("open", "list", "write", "read back", "exclusive create", "small objects", "large object", "delete"):
        assert check in output
    assert "objects/s" in output and "MB/s" in output
    assert "the store is usable" in output


@pytest.mark.s3
def test_doctor_on_moto(s3_server: S3Server, s3_bucket: str) -> None:
    code, output = run("doctor", f"s3://{s3_bucket}/dr", "--quick", "-o", f"endpoint_url={s3_server.endpoint_url}")
    assert code == 0, output
    assert "the store is usable" in output


def test_doctor_on_a_dead_endpoint_explains_and_fails() -> None:
    code, output = run("doctor", "s3://bucket", "-o", "endpoint_url=http://127.0.0.1:9")
    assert code == 1
    assert "127.0.0.1:9" in output and "nothing answered" in output
    assert "not usable" in output


def test_doctor_on_an_unmounted_gluster_folder(tmp_path: Path) -> None:
    code, output = run("doctor", str(tmp_path / "gv0"), "-o", "mount=glusterfs")
    assert code == 1
    assert "glusterfs mount" in output and "mount the shared volume" in output


def test_a_bad_option_is_a_usage_error() -> None:
    code, output = run("doctor", "-o", "no-equals-sign")
    assert code == 2
    assert "KEY=VALUE" in output


def test_the_console_script_runs_as_a_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", "doctor", "nosuch://x"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "unknown storage protocol 'nosuch'" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_broken_config_is_one_line_and_exit_status_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = use_config(tmp_path, monkeypatch, "[stores.x\n")
    result = CliRunner().invoke(cli, ["stores"])
    assert result.exit_code == 2
    assert result.output.startswith(f"datamount: error: {config}: not valid TOML")
    assert len(result.output.strip().splitlines()) == 1
    debug = CliRunner().invoke(cli, ["--debug", "stores"])
    assert debug.exit_code == 2 and debug.stderr.startswith("Traceback (most recent call last)")
    assert "StoreConfigError: " in debug.stderr and "not valid TOML" in debug.stderr


def test_a_store_that_is_no_profile_exits_2_and_names_the_closest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    use_config(tmp_path, monkeypatch, '[stores.team]\nurl = "memory://team"\n')
    code, output = run("ls", "--store", "teem")
    assert code == 2, output
    assert output.startswith("datamount: error: ") and "did you mean 'team'?" in output
    monkeypatch.setenv("DATAMOUNT_STORE", "teem")
    code, output = run("ls")
    assert code == 2, output
    assert "$DATAMOUNT_STORE" in output and "did you mean 'team'?" in output
    assert not (tmp_path / "teem").exists()


def test_stores_hides_userinfo_in_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_config(
        tmp_path,
        monkeypatch,
        'default = "rgw"\n[stores.rgw]\nurl = "s3://bucket/p"\nendpoint_url = "http://user:secret@127.0.0.1:9/"\n'
        '[stores.web]\nurl = "http://user:secret@127.0.0.1:9/data"\n',
    )
    code, output = run("stores")
    assert code == 0, output
    assert "rgw" in output and "127.0.0.1:9" in output
    assert "secret" not in output and "user:" not in output


def test_doctor_hides_userinfo_in_urls() -> None:
    for args in (
        ["s3://bucket", "-o", "endpoint_url=http://user:secret@127.0.0.1:9/"],
        ["http://user:secret@127.0.0.1:9/data"],
        ["nosuch://user:secret@host/x"],
    ):
        code, output = run("doctor", *args)
        assert code == 1
        assert "secret" not in output and "user:" not in output, output


@pytest.mark.parametrize(
    "name", ["aws_secret_access_key", "secretAccessKey", "access_key_id", "api-token", "sas_key", "hmac_password"]
)
def test_stores_hides_credentials_under_any_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """An option the backend does not know is refused when the store opens, but `stores` shows the profile before:
    a credential under a name of another tool's (or misspelt) is masked all the same."""
    use_config(tmp_path, monkeypatch, f'[stores.team]\nurl = "s3://bucket/p"\n{name} = "never-printed-secret"\n')
    for args in (["stores"], ["stores", "--json"]):
        code, output = run(*args)
        assert code == 0, output
        assert f"{name}" in output and "***" in output
        assert "never-printed-secret" not in output


def test_stores_hides_secrets_in_the_query_of_datamount_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """`DATAMOUNT_STORE` is shown as the user set it, but for the value of each secret parameter of its query (a
    URL of that kind is then refused, naming only the parameters)."""
    monkeypatch.setenv(
        "DATAMOUNT_STORE", "s3://bucket/p?endpoint_url=http://127.0.0.1:9&secret=never-printed&X-Amz-Signature=ab12cd"
    )
    code, output = run("stores")
    assert code == 0, output
    assert "endpoint_url=http://127.0.0.1:9" in output and "secret=***" in output and "X-Amz-Signature=***" in output
    assert "never-printed" not in output and "ab12cd" not in output
    code, output = run("ls")
    assert code == 2
    assert "secret" in output and "never-printed" not in output
