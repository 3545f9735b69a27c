"""VerifyReport: what Zrecord.verify() and the datasets' verify() found, record by record.

The public face of loaderx._store.verify: every name here is part of loaderx's API."""

from loaderx._store.verify import (
    BadRecord,
    VerifyReport,
    REASONS,
)

__all__ = [
    "BadRecord",
    "VerifyReport",
    "REASONS",
]
