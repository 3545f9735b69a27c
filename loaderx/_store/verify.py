"""VerifyReport: what Zrecord.verify() and the datasets' verify() found, record by record.

This module stays interpreted: a report is built once per verify() call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["BadRecord", "VerifyReport", "REASONS"]

# The reasons a record can be reported for (see zig/include/loaderx.h, LX_VERIFY_*; "size" is
# a dataset's: the record's length does not fit the schema).
REASONS: Final = ("entry", "chunk", "checksum", "frame", "no_dictionary", "size")


@dataclass(frozen=True, order=True)
class BadRecord:
    """One record that failed verification and why (one of REASONS)."""

    index: int
    reason: str


class VerifyReport:
    """The result of verify(): every record checked, the bad ones listed.

    records: the records checked (the store's length when verify started).
    has_checksums: whether the store keeps per-record checksums (stores written before
        loaderx had them do not; their records are only checked for impossible table entries
        and, when compressed, for frames that do not decode).
    checksummed: records compared with their checksum.
    bad: the bad records, sorted by index (at most `limit` of them).
    bad_count: how many bad records there are in all (may exceed len(bad)).
    missing_sums: the sums.zr files that stores written with checksums no longer have (their
        records were checked without them); a finding, like a bad record. A store written
        before checksums is not listed (see loaderx._store.sums_expected).
    """

    path: str
    records: int
    has_checksums: bool
    checksummed: int
    bad: list[BadRecord]
    bad_count: int
    missing_sums: list[str]

    def __init__(
        self,
        path: str,
        records: int,
        has_checksums: bool,
        checksummed: int,
        bad: list[BadRecord],
        bad_count: int,
        missing_sums: list[str] | None = None,
    ) -> None:
        self.path = path
        self.records = records
        self.has_checksums = has_checksums
        self.checksummed = checksummed
        self.bad = bad
        self.bad_count = bad_count
        self.missing_sums = [] if missing_sums is None else missing_sums

    @property
    def ok(self) -> bool:
        """True when no record is bad and no store lost its checksums."""
        return self.bad_count == 0 and not self.missing_sums

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        sums = "with checksums" if self.has_checksums else "without checksums"
        if self.missing_sums:
            sums += f" (lost: {', '.join(self.missing_sums)})"
        shown = ", ".join(f"{b.index}: {b.reason}" for b in self.bad[:8])
        more = "" if self.bad_count <= 8 else f", ... ({self.bad_count} in all)"
        return (
            f"VerifyReport({self.path!r}, {self.records} records {sums}, "
            f"{self.bad_count} bad{': ' + shown + more if self.bad_count else ''})"
        )
