"""Checkpoint state of the step-based loaders: (seed, step) plus a fingerprint of their data.

A loader's batches are a pure function of (seed, step) and of what its index stream depends on:
the record counts, the global batch size and the sampling mode (plus, for a mixture, the
weights). The fingerprint also names what the records hold: each dataset's content identity
over the records sampled from (DenseDataset.content_identity, a digest of their checksums), so
a dataset rewritten with other records of the same count is refused while the same dataset
reopened, opened read-only, copied or read from a URL is not. The state dict holds all of it as plain ints, strings, lists and dicts, so that it
can go into torch.save, JSON or msgpack next to a model's weights. Loading a state into a loader
whose fingerprint differs raises StateMismatchError naming each difference, because resuming
there would silently read other records.

The fingerprint holds the global batch size rather than the host count: hosts take contiguous
slices of one global batch, so resuming on another number of hosts with the same global batch
sees the same batches, and is allowed.

Left interpreted: it runs once per save or load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from loaderx.errors import StateMismatchError
from loaderx._loading.sampler import SEED_LIMIT, STEP_LIMIT

STATE_FORMAT: Final = "loaderx-loader-state"
STATE_VERSION: Final = 1
_KEYS: Final = ("format", "version", "seed", "step", "fingerprint")


def make_state(seed: int, step: int, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The state dict of a loader at `step` (the next step it would yield)."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "seed": seed,
        "step": step,
        "fingerprint": fingerprint,
    }


# Fingerprint keys that later versions added: a state saved before one existed cannot say
# what it held, and is compared without it ("data", the datasets' content identities).
_KEYS_ADDED: Final = ("data",)


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    lines = []
    for key in sorted(set(saved) | set(current)):
        if key in _KEYS_ADDED and key not in saved:
            continue
        old = saved.get(key, "<absent>")
        new = current.get(key, "<absent>")
        if old != new:
            lines.append(f"{key}: saved {old!r}, now {new!r}")
    return lines


def read_state(state: object, fingerprint: dict[str, Any]) -> tuple[int, int]:
    """(seed, step) of a state dict made for this fingerprint; raises if it was made for another.

    Malformed states raise TypeError/ValueError; a state of other data raises StateMismatchError.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"a loader state is a dict (from state_dict()), not {type(state).__name__}")
    unknown = sorted(str(key) for key in state if key not in _KEYS)
    if unknown:
        # A key this version does not know could change what the state means; refusing it is
        # safer than resuming without it.
        raise ValueError(
            f"the loader state has keys this loaderx does not know ({', '.join(unknown)}); "
            f"a state holds exactly {', '.join(_KEYS)}"
        )
    missing = [key for key in _KEYS if key not in state]
    if missing or state["format"] != STATE_FORMAT:
        raise ValueError(
            f"not a loaderx loader state (missing {', '.join(missing) or 'nothing'}, "
            f"format {state.get('format')!r}); pass what state_dict() returned"
        )
    if state["version"] != STATE_VERSION:
        raise ValueError(
            f"loader state version {state['version']!r}; this loaderx reads {STATE_VERSION}"
        )
    seed, step = state["seed"], state["step"]
    # A step of 2**64 is the state of a loader past its last step (it refuses next()), kept
    # so that every state_dict() loads back.
    for name, value, limit, bounds in (
        ("seed", seed, SEED_LIMIT, "[0, 2**64)"), ("step", step, STEP_LIMIT + 1, "[0, 2**64]")
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
            raise ValueError(f"the state's {name} must be an int in {bounds}, got {value!r}")
    saved = state["fingerprint"]
    if not isinstance(saved, Mapping):
        raise ValueError(f"the state's fingerprint must be a dict, got {type(saved).__name__}")
    changes = _differences(saved, fingerprint)
    if changes:
        raise StateMismatchError(
            "this state was saved for other data; resuming would read other records than the "
            "saved run would have. Differences: " + "; ".join(changes)
        )
    return seed, step
