"""A second opinion on each library's exports, from LLVM's own symbol dumpers when installed.

tools/libinspect.py reads export tables itself so the wheel checks need nothing external; this
module dumps the same tables with llvm-nm (ELF dynamic symbols), `llvm-objdump -p` (the PE export
table) and `llvm-objdump --macho --exports-trie` (dyld's export trie), and the release stops if
the two readings differ. Without LLVM installed (apt-get install llvm) it says so and moves on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def llvm_exports(path: Path, binary_format: str) -> frozenset[str] | None:
    """Exported names as LLVM reads them; None when the needed LLVM tool is not installed."""
    if binary_format == "elf":
        nm = shutil.which("llvm-nm")
        if nm is None:
            return None
        out = _run([nm, "-D", "--defined-only", "--extern-only", "--format=just-symbols", str(path)])
        return frozenset(line.strip() for line in out.splitlines() if line.strip())
    objdump = shutil.which("llvm-objdump")
    if objdump is None:
        return None
    if binary_format == "macho":
        out = _run([objdump, "--macho", "--exports-trie", str(path)])
        return frozenset(m.removeprefix("_") for m in re.findall(r"^0x[0-9A-Fa-f]+\s+(\S+)", out,
                                                                 flags=re.MULTILINE))
    out = _run([objdump, "-p", str(path)])
    table = out.split("Export Table:", 1)[1] if "Export Table:" in out else ""
    table = table.split("\n\n", 1)[0]
    return frozenset(re.findall(r"^\s+\d+\s+0x[0-9a-f]+\s+(\S+)$", table, flags=re.MULTILINE))
