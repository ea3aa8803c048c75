"""What the native core is given at import: the constants and error texts both sides must
agree on, each defined once in the package, and the package's exception for a bug of the
kit's (``native/src/api/shared.rs``, ``native/src/errors.rs``)."""

from __future__ import annotations

from types import ModuleType

from mwcore.api import context, ids, signing
from mwcore.api import headers as user_headers
from mwcore.api.record import ID_HEADER, LATE_HEADER
from mwcore.errors import InternalError
from mwcore.limits import MAX_HEADER_BYTES, MAX_HEADERS
from mwcore.serde.framing import SCHEMA_ID_HEADER
from mwcore.store.checkpoint_wire import DOMAIN_CODES


def give(rust: ModuleType) -> None:
    """Hand the constants to ``rust`` (the native module), once per process."""
    rust.init(
        id_bytes=ids.ID_BYTES,
        mac_bytes=signing.MAC_BYTES,
        headers=(ID_HEADER, LATE_HEADER, signing.MAC_HEADER, SCHEMA_ID_HEADER),
        max_value_bytes=context.MAX_VALUE_BYTES,
        timer_index=context.TIMER_INDEX,
        domain_codes=DOMAIN_CODES,
        internal_error=InternalError,
        undeclared=context.undeclared,
        too_large=context.too_large,
        set_none=context.set_none,
        max_headers=MAX_HEADERS,
        max_header_bytes=MAX_HEADER_BYTES,
        to_send=user_headers.to_send,
        over_bounds=user_headers.over_bounds,
    )
