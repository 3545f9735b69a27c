"""`python -m loaderx ...`: the same command as the `loaderx` console script (loaderx.cli)."""

from loaderx.cli import entry_point

if __name__ == "__main__":
    entry_point()
