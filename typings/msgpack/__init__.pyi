# Minimal stubs for the part of msgpack loaderx uses (msgpack ships no type information).
from typing import Any

def packb(o: Any, *, use_bin_type: bool = ..., strict_types: bool = ...) -> bytes: ...
def unpackb(
    packed: bytes,
    *,
    raw: bool = ...,
    use_list: bool = ...,
    strict_map_key: bool = ...,
    max_buffer_size: int = ...,
) -> Any: ...
