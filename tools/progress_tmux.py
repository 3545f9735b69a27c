"""Shows the conversion progress line in real tmux windows of 80 and 120 columns.

    python3 tools/progress_tmux.py        (needs tmux: apt-get install -y tmux)

Runs a scripted report (a line that grows, then shrinks, then finishes) inside tmux, then
prints what `tmux capture-pane` shows, so a person can see that the line fits the window and
leaves nothing stale behind. tests/data/test_progress.py checks the same in a pseudo-terminal.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from loaderx._data.progress import Progress
report = Progress("from_numpy /data/imagenet/train_images_256px", 100_000)
report.interval = 0.0
for done, nbytes, age in [(1, 1 << 50, 1000.0), (39_999, 1 << 40, 3.0), (59_000, 1 << 20, 3000.0),
                          (1_000, 0, 3000.0)]:
    report._started -= age
    report.update(done, nbytes)
    time.sleep(0.2)
report.finish()
time.sleep(60)
"""


def main() -> int:
    if shutil.which("tmux") is None:
        print("tmux is not installed (apt-get install -y tmux)", file=sys.stderr)
        return 1
    code = SCRIPT.format(root=str(ROOT))
    for columns in (80, 120):
        session = f"loaderx-progress-{columns}"
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
        command = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(columns), "-y", "4",
                        command], check=True)
        time.sleep(3)
        shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], check=True,
                               capture_output=True, text=True).stdout
        subprocess.run(["tmux", "kill-session", "-t", session], check=True)
        print(f"--- tmux, {columns} columns ---")
        print(shown.rstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
