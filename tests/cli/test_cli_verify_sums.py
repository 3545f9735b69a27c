"""verify on a store without sums.zr: a finding when the store was written with checksums (its
sums.zr was lost), a note when it was written before loaderx kept them."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import msgpack
import numpy as np
import pytest

from loaderx.cli import EXIT_OK, EXIT_PROBLEM, main
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord

DATA = np.arange(100 * 8, dtype=np.int32).reshape(100, 8)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def as_before_checksums(folder: Path) -> None:
    """What a dataset written before checksums holds: no sums.zr, a schema without its checksum
    field (schemas gained it after sums.zr came)."""
    os.remove(folder / "sums.zr")
    fields = msgpack.unpackb((folder / "schema.msgpack").read_bytes())
    del fields["checksum"]
    (folder / "schema.msgpack").write_bytes(msgpack.packb(fields, use_bin_type=True))


def test_a_deleted_sums_file_is_a_finding_that_names_it(tmp_path: Path) -> None:
    from_numpy(tmp_path / "ds", DATA, codec="raw", progress=False)
    os.remove(tmp_path / "ds" / "sums.zr")
    status, text = run("verify", str(tmp_path / "ds"))
    assert status == EXIT_PROBLEM
    sums = tmp_path / "ds" / "sums.zr"
    assert (f"  missing checksums: {sums} is gone, but this store was written with checksums"
            in text)
    assert text.splitlines()[-1] == "1 store without its sums.zr"
    assert "OK" not in text.splitlines()
    report = json.loads(run("verify", str(tmp_path / "ds"), "--json")[1])
    assert report["ok"] is False and report["missing_sums"] == [str(sums)]
    assert report["bad_count"] == 0 and report["has_checksums"] is False
    with DenseDataset(tmp_path / "ds", readonly=True) as ds:  # the library says the same
        found = ds.verify()
        assert not found.ok and found.missing_sums == [str(sums)] and found.bad_count == 0
        assert np.array_equal(ds[:], DATA)  # the records themselves still read


def test_a_store_written_before_checksums_passes_with_a_note(tmp_path: Path) -> None:
    from_numpy(tmp_path / "old", DATA, codec="raw", progress=False)
    as_before_checksums(tmp_path / "old")
    status, text = run("verify", str(tmp_path / "old"))
    assert status == EXIT_OK
    assert ("(no checksums: this store was written before loaderx kept them; table entries and "
            "frames only)") in text
    assert "missing" not in text and text.splitlines()[-1] == "OK"
    report = json.loads(run("verify", str(tmp_path / "old"), "--json")[1])
    assert report["ok"] is True and report["missing_sums"] == []


def test_a_bare_store_without_evidence_passes_and_one_with_a_trailed_dict_does_not(
    tmp_path: Path,
) -> None:
    """A bare Zrecord has no schema: only a dict.zr with its trailer (which came with sums.zr)
    shows that it had checksums."""
    with Zrecord(tmp_path / "bare", create=True, codec="zstd") as store:
        store.append([b"x" * 40] * 20)
    os.remove(tmp_path / "bare" / "sums.zr")
    assert run("verify", str(tmp_path / "bare"))[0] == EXIT_OK
    with Zrecord(tmp_path / "dict", create=True, codec="zstd_dict") as store:
        store.train_dict([bytes([i]) * 64 + b"%d" % i for i in range(200)], 1024)
        store.append([b"y" * 64] * 20)
    os.remove(tmp_path / "dict" / "sums.zr")
    status, text = run("verify", str(tmp_path / "dict"))
    assert status == EXIT_PROBLEM and f"{tmp_path / 'dict' / 'sums.zr'} is gone" in text


def test_one_shard_without_its_sums_is_named(tmp_path: Path) -> None:
    from_numpy(tmp_path / "sharded", DATA, codec="raw", shard_records=30, workers=2,
               progress=False)
    lost = tmp_path / "sharded" / "shard-000001" / "sums.zr"
    os.remove(lost)
    status, text = run("verify", str(tmp_path / "sharded"))
    assert status == EXIT_PROBLEM and f"missing checksums: {lost} is gone" in text
    manifest = msgpack.unpackb((tmp_path / "sharded" / "shards.msgpack").read_bytes())
    without = [shard["records"] for shard in manifest["shards"] if shard["name"] == "shard-000001"]
    assert (f"({100 - without[0]} against their checksums, the rest by table entries and frames "
            "only") in text


def test_verify_checks_every_store_a_conversion_wrote_into_one_folder(tmp_path: Path) -> None:
    # `convert x.npz out` (or a Parquet file) writes one store per array under out/; `info out`
    # listed them, but `verify out` refused the folder as "not a loaderx dataset".
    out = tmp_path / "out"
    from_numpy(out / "images", DATA, codec="raw")
    from_numpy(out / "labels", np.arange(100, dtype=np.int64), codec="raw")
    status, text = run("verify", str(out))
    assert status == EXIT_OK, text
    assert f"{out / 'images'}: 100 records checked" in text
    assert f"{out / 'labels'}: 100 records checked" in text
    assert text.rstrip().endswith(f"{out}: 2 stores checked; OK")
    with open(out / "labels" / "0.zr", "r+b") as chunk:  # raw int64 records in index order
        chunk.seek(8 * 7)
        chunk.write(b"\xff")
    status, text = run("verify", str(out))
    assert status == EXIT_PROBLEM
    assert "bad record 7: checksum" in text
    assert text.rstrip().endswith(f"{out}: 2 stores checked; problems in labels")
    reports = json.loads(run("verify", str(out), "--json")[1])
    assert [report["path"] for report in reports] == [str(out / "images"), str(out / "labels")]
    assert [report["ok"] for report in reports] == [True, False]
    assert reports[1]["bad"] == [{"index": 7, "reason": "checksum"}]


def test_commands_of_one_store_name_the_stores_a_folder_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # stats, head, bench and compact of a conversion's folder said only "not a loaderx dataset".
    out = tmp_path / "out"
    for name in ("labels", "images"):
        from_numpy(out / name, np.arange(10, dtype=np.int64), codec="raw")
    for command in (["stats"], ["head"], ["bench", "--rounds", "1"], ["compact"]):
        status, text = run(command[0], str(out), *command[1:])
        assert status == EXIT_PROBLEM and text == ""
        assert (f"{out}: a folder of 2 stores (images, labels), not one store: give one of "
                f"them, e.g. {out / 'images'}") in capsys.readouterr().err
