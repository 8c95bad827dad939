"""numba compilation with an on-disk cache, shared by the compiled loops of every tier."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F) -> F:
    """`fn` compiled without the GIL, its machine code cached on disk: beside its file, else
    in the user's cache directory (`NUMBA_CACHE_DIR` chooses). With no writable place for it
    (a read-only image, no home), compiled at each start instead (~0.5 s)."""
    try:
        return cast(F, numba.njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cast(F, numba.njit(nogil=True)(fn))
