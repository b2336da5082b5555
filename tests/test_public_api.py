"""The public API is what the docs show: every import the README and ``docs/`` write works and names public API, and
no module reaches into another package's private modules."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Folders of the installed packages, by package name.
PACKAGES = {"storage": "datamount.storage", "datasets": "datamount.datasets", "readers": "datamount.readers"}
PACKAGES["cli"] = "datamount.cli"
PACKAGES["torch_integration"] = "datamount.torch"
PACKAGES["ray_integration"] = "datamount.ray"
PACKAGES["mount"] = "datamount.mount"
PACKAGES["ui"] = "datamount.ui"
PACKAGES["urlfs"] = "datamount.urlfs"
#: Source folders whose imports are checked: the product, its tests and its benchmarks.
SOURCE_FOLDERS = [*PACKAGES, "tests", "benchmarks"]

#: How to install PyTorch's CPU build, from PyTorch's own wheel index (PyPI's torch is the CUDA build, several GB).
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
#: Public modules and names that need an optional package: (the package to import, how to install it).
#: Where that package is missing, the checks of what needs it are skipped with the reason; nothing else may need one.
OPTIONAL = {
    "datamount.torch": ("torch", CPU_TORCH),
    "datamount.torch.StatefulDataLoader": ("torchdata", "pip install 'datamount[torch]'"),
    "datamount.ray": ("ray.data", "pip install 'datamount[ray]'"),
}

DOCUMENTED_IMPORT = re.compile(r"^\s*from (datamount(?:\.\w+)+) import ([^#\n]+)", re.MULTILINE)


def documented_imports() -> list[tuple[str, str, str]]:
    """``(document, module, name)`` for each name a ``from datamount... import ...`` line of the docs imports."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for module, names in DOCUMENTED_IMPORT.findall(text):
            for name in names.replace("(", "").replace(")", "").split(","):
                name = name.strip().split(" as ")[0].strip()
                if name:
                    found.append((document.name, module, name))
    return found


def missing_requirement(qualified_name: str) -> str | None:
    """Why ``qualified_name`` (a module, or ``module.name``) cannot be imported here: the optional package it needs
    and how to install it; ``None`` when it needs none, or has it."""
    for needer, (package, install) in OPTIONAL.items():
        if (qualified_name + ".").startswith(needer + ".") and importlib.util.find_spec(package) is None:
            return f"{needer} needs {package}, which is not installed ({install})"
    return None


def skip_unless_importable(qualified_name: str) -> None:
    """Skip the test, with the reason, where an optional package that ``qualified_name`` needs is missing."""
    reason = missing_requirement(qualified_name)
    if reason is not None:
        pytest.skip(reason)


def test_the_docs_import_something() -> None:
    assert len({module for _, module, _ in documented_imports()}) >= 5


@pytest.mark.parametrize(
    ("document", "module", "name"), documented_imports(), ids=lambda value: str(value).replace(".", "_")
)
def test_every_documented_import_is_public_api(document: str, module: str, name: str) -> None:
    skip_unless_importable(f"{module}.{name}")
    imported = importlib.import_module(module)
    assert hasattr(imported, name), f"{document}: {module} has no {name}"
    public = getattr(imported, "__all__", None)
    assert public is not None, f"{document}: {module} has no __all__"
    assert name in public, f"{document}: {name} is imported from {module} but not listed in its __all__"


def test_without_torch_datamount_torch_says_how_to_install_its_cpu_build() -> None:
    """The error names the command the README gives, not a plain ``pip install torch`` (the CUDA build)."""
    code = "import sys\nsys.modules['torch'] = None  # as if torch were not installed\nimport datamount.torch"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"ImportError: datamount.torch needs PyTorch: {CPU_TORCH} for its CPU build" in done.stderr, done.stderr
    assert CPU_TORCH in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("package", sorted(PACKAGES.values()))
def test_every_package_lists_only_names_it_has(package: str) -> None:
    skip_unless_importable(package)
    imported = importlib.import_module(package)
    listed = getattr(imported, "__all__", [])
    unavailable = {name: missing_requirement(f"{package}.{name}") for name in listed}
    missing = [name for name in listed if unavailable[name] is None and not hasattr(imported, name)]
    assert missing == []
    reasons = [reason for reason in unavailable.values() if reason is not None]
    if reasons:
        pytest.skip(f"the other names are there; not checked: {'; '.join(reasons)}")


def module_name(path: Path) -> str:
    """The dotted name a source file is imported as (``storage/store.py`` -> ``datamount.storage.store``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in PACKAGES:
        return ".".join([*PACKAGES[parts[0]].split("."), *parts[1:]])
    return ".".join(parts)


def imported_modules(path: Path) -> list[str]:
    """Every ``datamount...`` module ``path`` imports (``from a.b import c`` counts ``a.b`` and ``a.b.c``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return [name for name in names if name.startswith("datamount.")]


def is_package(module: str) -> bool:
    parts = module.split(".")[1:]
    return len(parts) >= 1 and (ROOT / Path(*parts) / "__init__.py").is_file()


def private_owner(module: str) -> str | None:
    """The package a private module (or a module's private name) belongs to: ``datamount.readers._x`` and
    ``datamount.readers.stream._y`` -> ``datamount.readers``; None when every part is public."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            container = ".".join(parts[:index])
            return container if is_package(container) else container.rpartition(".")[0]
    return None


def source_files() -> list[Path]:
    return sorted(path for folder in SOURCE_FOLDERS for path in (ROOT / folder).rglob("*.py"))


def test_no_module_imports_a_private_module_of_another_package() -> None:
    crossings = []
    for path in source_files():
        importer = module_name(path)
        importer_package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for module in imported_modules(path):
            owner = private_owner(module)
            if owner is not None and not (importer_package + ".").startswith(owner + "."):
                crossings.append(f"{path.relative_to(ROOT)} imports {module}")
    assert crossings == []


def test_the_import_walker_sees_a_crossing() -> None:
    assert private_owner("datamount.readers._processes") == "datamount.readers"
    assert private_owner("datamount.storage.backends._limits") == "datamount.storage.backends"
    assert private_owner("datamount.storage.store") is None
    assert private_owner("datamount.storage.store._grouped") == "datamount.storage"
    assert module_name(ROOT / "readers" / "master" / "dist.py") == "datamount.readers.master.dist"


def test_every_package_folder_is_installed() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(init) for folder in PACKAGES for init in (ROOT / folder).rglob("__init__.py")}
    assert found == listed


def test_reading_loads_no_download_client() -> None:
    """A training job's ``from datamount.readers import reader`` pays for what reading needs, not for requests
    (downloads of public datasets import it when they start)."""
    code = "import sys; from datamount.readers import reader; print('requests' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("pack", [False, True], ids=["unpacked", "packed"])
def test_a_first_pass_loads_neither_pandas_nor_pyarrow_dataset(tmp_path: Path, pack: bool) -> None:
    """Importing them takes 0.4 s, more than a first pass over 4,000 files of 110 KB."""
    from datamount.datasets import pack as pack_version
    from datamount.datasets import upload
    from datamount.storage import open_store

    (tmp_path / "files").mkdir()
    for index in range(20):
        (tmp_path / "files" / f"{index}.bin").write_bytes(bytes([index]) * 100)
    listing = tmp_path / "files.list"
    listing.write_text("".join(f"files/{index}.bin\t{index}\n" for index in range(20)), encoding="utf-8")
    store = open_store(tmp_path / "store")
    upload(listing, "files", store=store)
    if pack:
        pack_version("files", store=store)
    code = (
        "import sys; from datamount.readers import reader; "
        f"rows = list(reader('files', {str(tmp_path / 'store')!r})()); "
        "print(len(rows), sorted(name for name in ('pandas', 'pyarrow.dataset') if name in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "20 []"


def test_a_function_named_as_its_module_stays_the_function_once_the_module_is_imported() -> None:
    """``datamount.datasets`` imports ``pack``, ``upload``... when first used; the import system binds a submodule
    to its package under its name, which must not replace the function."""
    code = (
        "import datamount.datasets as datasets, datamount.datasets.pack, datamount.datasets.upload\n"
        "from datamount.datasets import export, pack, pack_ray, upload, verify\n"
        "from datamount.datasets.pack import pack as defined\n"
        "print(pack is defined, [f.__module__ for f in (export, pack, pack_ray, upload, verify, datasets.upload)])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    modules = [f"datamount.datasets.{name}" for name in ("export", "pack", "pack_ray", "upload", "verify", "upload")]
    assert done.stdout.strip() == f"True {modules}"
