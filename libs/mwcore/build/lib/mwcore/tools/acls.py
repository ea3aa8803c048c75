"""``mw acls``: print (and with ``--apply`` create) the Kafka ACLs that make a
namespace's control topics writable only by their owners (``transport/acls.py``)."""

from __future__ import annotations

import json

from mwcore.errors import ConfigError
from mwcore.transport.acls import apply, pipeline_acls


def main(
    bootstrap: str | None,
    namespace: str,
    authority: str,
    services: list[str],
    writers: list[str],
    do_apply: bool,
) -> int:
    owned: dict[str, str] = {}
    for w in writers:
        stream, _, principal = w.partition("=")
        if not stream or not principal:
            raise ConfigError(f"--writer {w!r}: not STREAM=User:<name>")
        owned[stream] = principal
    acls = pipeline_acls(namespace, authority, services, owned)
    for a in acls:
        print(a.line())
    if do_apply:
        if bootstrap is None:
            raise ConfigError("--apply needs a broker: pass --bootstrap host:port or set MW_BOOTSTRAP")
        apply(bootstrap, acls)
    print(json.dumps({"acls": len(acls), "applied": do_apply}), flush=True)
    return 0
