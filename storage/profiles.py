"""Named stores in a TOML file, and how the default store is chosen.

The file is ``$DATAMOUNT_CONFIG``, else ``config.toml`` in datamount's XDG config folder::

    default = "team"                  # optional; DATAMOUNT_STORE wins over it

    [stores.team]
    url = "s3://ml-data/datamount"
    endpoint_url = "http://rgw.example:7480"

    [stores.gluster]
    url = "/mnt/gv0/datamount"
    mount = "glusterfs"

Every key but ``url`` is an option of the store's backend.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from datamount.storage.errors import StoreConfigError

APP_NAME = "datamount"
CONFIG_ENV = "DATAMOUNT_CONFIG"
STORE_ENV = "DATAMOUNT_STORE"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Profile:
    """A named store: its URL and backend options."""

    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    """The parsed configuration file (empty when there is none)."""

    path: Path
    profiles: dict[str, Profile]
    default: str | None = None


@dataclass(frozen=True)
class Target:
    """What a store reference resolved to, and why (for ``datamount stores``)."""

    url: str
    options: dict[str, Any]
    name: str | None
    source: str


def config_path() -> Path:
    """The configuration file in force."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return platformdirs.user_config_path(APP_NAME) / "config.toml"


def default_store_path() -> Path:
    """The embedded default store: a folder in datamount's XDG data folder."""
    return platformdirs.user_data_path(APP_NAME) / "store"


def load_config(path: Path | None = None) -> Config:
    """Read and check the configuration file; a missing file is an empty configuration."""
    path = path or config_path()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV):
            raise StoreConfigError(f"{CONFIG_ENV} names {path}, which does not exist") from None
        return Config(path, {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise StoreConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise StoreConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    unknown = set(raw) - {"default", "stores"}
    if unknown:
        raise StoreConfigError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}; expected 'default' and [stores.NAME]"
        )
    profiles = {name: _profile(path, name, body) for name, body in (raw.get("stores") or {}).items()}
    default = raw.get("default")
    if default is not None and not isinstance(default, str):
        raise StoreConfigError(f"{path}: 'default' must be a store name or URL")
    return Config(path, profiles, default)


def _profile(path: Path, name: str, body: Any) -> Profile:
    if not PROFILE_NAME.match(name):
        raise StoreConfigError(f"{path}: store name {name!r} may hold only letters, digits, '.', '_' and '-'")
    if not isinstance(body, dict) or not isinstance(body.get("url"), str) or not body["url"]:
        raise StoreConfigError(f'{path}: [stores.{name}] needs a url = "..." entry')
    options = {k: v for k, v in body.items() if k != "url"}
    return Profile(name, body["url"], options)


def resolve(target: str | os.PathLike[str] | None, config: Config | None = None) -> Target:
    """Turn a store reference (profile name, URL, path, or ``None`` for the default) into a URL and options.

    A name that matches a profile means that profile. A bare word (a name a profile could have: letters, digits,
    ``.``, ``_``, ``-``) that is neither a profile nor an existing folder is a :class:`StoreConfigError` naming the
    closest profile, so that a misspelt profile never becomes a new local folder. Anything else is a URL or a path
    (write ``./name`` for a new folder, or for a folder that has a profile's name).
    """
    config = config if config is not None else load_config()
    if target is None:
        from_env = os.environ.get(STORE_ENV)
        if from_env:
            return _resolve_named(from_env, config, f"${STORE_ENV}")
        if config.default:
            return _resolve_named(config.default, config, f"'default' in {config.path}")
        return Target(str(default_store_path()), {}, None, "embedded default")
    return _resolve_named(os.fspath(target), config, "argument")


def _resolve_named(ref: str, config: Config, source: str) -> Target:
    profile = config.profiles.get(ref)
    if profile is not None:
        return Target(profile.url, dict(profile.options), profile.name, f"profile {profile.name!r} ({source})")
    if not ref.strip():
        raise StoreConfigError(f"empty store reference ({source})")
    if PROFILE_NAME.match(ref) and not os.path.isdir(ref):
        raise StoreConfigError(_no_such_profile(ref, config, source))
    return Target(ref, {}, None, source)


def _no_such_profile(ref: str, config: Config, source: str) -> str:
    where = f"store {ref!r} ({source}) is neither a profile nor an existing folder"
    if not config.profiles:
        return f"{where}, and no profiles are configured in {config.path}; write ./{ref} for a new local folder"
    names = sorted(config.profiles)
    closest = difflib.get_close_matches(ref, names, n=1)
    guess = f"did you mean {closest[0]!r}? " if closest else ""
    return f"{where}: {guess}the profiles in {config.path} are {', '.join(names)}; write ./{ref} for a new local folder"
