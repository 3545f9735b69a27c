"""setuptools glue: builds the Zig library and the mypyc modules into the package.

`pip install .` and `python3 build.py compile` both come through here. The heavy lifting lives in
build.py; this file only wires it into setuptools' commands.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build as project_build  # noqa: E402  (build.py beside this file)


class BuildPyWithNative(build_py):
    """Builds libloaderx before the package's files are collected."""

    def run(self) -> None:
        if os.environ.get("LOADERX_SKIP_NATIVE") != "1":
            project_build.build_native(python=sys.executable)
        super().run()


class SdistWithZstd(sdist):
    """Puts zstd's pinned sources (lib/ and LICENSE) into the sdist under vendor/zstd/, so that
    building from the sdist needs no download. They are copied into the release tree only; the
    repository never holds them."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        vendored = Path(base_dir) / project_build.VENDORED_ZSTD.relative_to(project_build.ROOT)
        shutil.copytree(project_build.zstd_sources(python=sys.executable), vendored)


def mypyc_extensions() -> list[object]:
    if os.environ.get("LOADERX_NO_MYPYC") == "1":
        return []
    from mypyc.build import mypycify

    sources = project_build.mypyc_sources()
    return list(mypycify(sources, group_name="loaderx_compiled", opt_level="3"))


setup(
    cmdclass={"build_py": BuildPyWithNative, "sdist": SdistWithZstd},
    ext_modules=mypyc_extensions(),
    package_data={"loaderx": ["py.typed", "lib/*.so", "lib/*.dylib", "lib/*.dll"]},
)
