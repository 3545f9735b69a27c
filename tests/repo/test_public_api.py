"""Pins loaderx's public API: every public name at its public path, and nothing else public.

The model is numpy's own test_public_api.py. A public module is one whose dotted path has no part
that starts with an underscore; it lists its names in `__all__`, and everything else in the
package lives in private modules (`loaderx._os`, `loaderx._native`, `loaderx._store`,
`loaderx._data`, `loaderx._loading`) that these re-export from. Moving code between private
modules must not change this table; changing the table is an API change.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The specification's paths come first; the rest are the public modules built since.
PUBLIC_API: dict[str, set[str]] = {
    "loaderx.converter": {"CHUNK_BYTES_DEFAULT", "from_arrow", "from_iterator", "from_numpy", "recode",
                          "resolve_dict_size"},
    "loaderx.dataset": {"DICT_SIZE_MAX", "DICT_SIZE_MIN", "DICT_TIERS", "SHARD_RECORDS_MAX",
                        "DenseDataset", "RaggedDataset", "pad"},
    "loaderx.dataloader": {"Batch", "DataLoader", "Padding", "Transform", "WorkerError"},
    "loaderx.zrecord": {"CODECS", "RECORD_COUNT_MAX", "RECORD_SIZE_MAX", "Zrecord",
                        "pool_policy", "set_pool_policy", "set_raise_descriptor_limit", "set_stores_policy", "stores_policy",
                        "POOL_ALWAYS", "POOL_AUTO", "POOL_NEVER", "STORES_AUTO", "STORES_CACHED",
                        "STORES_STREAMING"},
    "loaderx.sampler": {"MODES", "Mode", "Sampler"},
    "loaderx.mixture": {"MixtureLoader", "MixtureSampler", "shares"},
    "loaderx.shards": {"SHARD_COUNT_MAX", "SHARD_RECORDS_MAX", "Manifest", "ShardEntry",
                       "commit_shards", "discard_staging", "read_manifest", "release_staging",
                       "staging_folder"},
    "loaderx.errors": {"CodecError", "CorruptStoreError", "DescriptorLimitError",
                       "DictionaryError", "LibraryNotFoundError", "LoaderxError",
                       "ManifestError", "MissingExtraError", "NotAStoreError", "ProducerGone",
                       "ReadOnlyStoreError", "RemoteChangedError", "RemoteError",
                       "UnsupportedURLError",
                       "SchemaError", "StateMismatchError", "StoreFullError", "StoreLockedError",
                       "WorkerError"},
    "loaderx.verify": {"REASONS", "BadRecord", "VerifyReport"},
    "loaderx.result_buffers": {"Limits", "POOL", "ResultBufferPool", "configure", "empty_bytes",
                               "release_buffers", "stats"},
    "loaderx.torch": {"CollatedBatch", "TorchDataset", "TorchLoader", "collate"},
    "loaderx.jax": {"DevicePrefetch", "device_prefetch", "global_batch", "process_shard"},
    "loaderx.ray": {"LoaderxDatasink", "LoaderxDatasource", "read_dataset", "recover_appends",
                    "write_dataset"},
    "loaderx.cli": {"EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "build_parser",
                    "entry_point", "main"},
    "loaderx.demo": {"main", "run", "parse_args", "synthetic_images"},
}

# The package itself: `loaderx.__version__` and `loaderx.release_buffers()`.
PACKAGE_API: set[str] = {"__version__", "release_buffers"}

# The modules that must import with numpy and msgpack alone (the optional integrations are the
# leaf modules torch, jax and ray, and they import their packages only when used).
CORE_MODULES = ["loaderx", "loaderx.zrecord", "loaderx.dataset", "loaderx.converter",
                "loaderx.dataloader", "loaderx.sampler", "loaderx.mixture", "loaderx.shards",
                "loaderx.errors", "loaderx.verify", "loaderx.result_buffers", "loaderx.cli"]
OPTIONAL_PACKAGES = ["torch", "jax", "jaxlib", "ray", "pyarrow", "obstore"]


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_public_module_lists_exactly_its_public_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    assert set(exported) == PUBLIC_API[name]


@pytest.mark.parametrize("name", sorted(PUBLIC_API))
def test_every_public_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    for attribute in sorted(PUBLIC_API[name]):
        assert hasattr(module, attribute), f"{name}.{attribute} is listed but missing"


def test_package_top_level() -> None:
    package = importlib.import_module("loaderx")
    for attribute in sorted(PACKAGE_API):
        assert hasattr(package, attribute)
    assert set(package.__all__) == PACKAGE_API - {"__version__"}


def test_star_import_gives_exactly_all() -> None:
    for name in sorted(PUBLIC_API):
        namespace: dict[str, object] = {}
        exec(f"from {name} import *", namespace)
        namespace.pop("__builtins__")
        assert set(namespace) == PUBLIC_API[name], name


def test_core_imports_without_the_optional_integrations() -> None:
    """`import loaderx.dataset` (and the rest of the core) works with numpy and msgpack alone:
    a child process whose import system refuses every optional package imports them all."""
    blocker = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {OPTIONAL_PACKAGES!r}:\n"
        "            raise ImportError('blocked optional package ' + name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Refuse())\n"
        f"import importlib\nfor m in {CORE_MODULES!r}: importlib.import_module(m)\n"
        f"loaded = sorted(p for p in {OPTIONAL_PACKAGES!r} if p in sys.modules)\n"
        "assert not loaded, loaded\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
