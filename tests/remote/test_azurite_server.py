"""The Azurite kit itself: the emulator starts and stops cleanly on 127.0.0.1, containers come
and go, and the fixtures' environment lets a bare az:// URL reach it through obstore."""

from __future__ import annotations

import obstore
import pytest
from obstore.store import from_url

from .azurite_server import AzuriteServer, azure_store, azurite_program
from .server_process import ServerError
from .kit_checks import assert_leaves_nothing


def test_start_and_stop_leave_no_process_no_listener_and_no_folder(
        azurite_server: AzuriteServer) -> None:
    program = azurite_program()
    assert program is not None  # the session's server runs, so the kit found Azurite
    server = AzuriteServer(program)
    assert_leaves_nothing(server, server.work_dir)


def test_containers_are_made_and_removed_with_their_blobs(azurite_server: AzuriteServer) -> None:
    azurite_server.create_container("loaderx-kit-check")
    try:
        obstore.put(azure_store(azurite_server.endpoint, "loaderx-kit-check"), "a/b", b"blob")
        assert list(azurite_server.objects("loaderx-kit-check")) == ["a/b"]
        with pytest.raises(ServerError, match="409"):
            azurite_server.create_container("loaderx-kit-check")
    finally:
        azurite_server.delete_container("loaderx-kit-check")
    with pytest.raises(ServerError, match="404"):
        azurite_server.delete_container("loaderx-kit-check")


def test_az_env_lets_a_bare_az_url_reach_the_emulator(az_env: AzuriteServer,
                                                      az_container: str) -> None:
    store = from_url(f"az://{az_container}/prefix")
    obstore.put(store, "x.bin", b"bytes")
    assert bytes(obstore.get(store, "x.bin").bytes()) == b"bytes"
    assert list(az_env.objects(az_container)) == ["prefix/x.bin"]
