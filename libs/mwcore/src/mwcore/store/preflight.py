"""Checks of Redis at a process's start: one line that says what to fix.

A service given a Redis it cannot use stops at once with a ``ConfigError`` (printed as
one line, exit code 2) instead of hanging or failing later with a traceback. Each
check is bounded (``timeout_s``).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import redis
from redis.cluster import RedisCluster

from mwcore.errors import ConfigError, shown_url
from mwcore.store.client import is_cluster_node
from mwcore.store.cluster_probe import cluster_info


def check_redis(
    url: str, setting: str = "MW_REDIS_URL", timeout_s: float = 5.0, *, durable: bool = False
) -> None:
    """Connect, authenticate and select the database of ``url``; a ConfigError naming
    ``setting`` if any of it fails. ``durable``: also refuse a store that can lose
    acknowledged writes in a crash (``check_durable``)."""
    shown = shown_url(url)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except ValueError as exc:
        raise ConfigError(f"{setting}={shown} is not a Redis URL ({exc})") from None
    try:
        client.connection_pool.make_connection()
    except TypeError as exc:  # a parameter this scheme takes not (?ssl_password= without rediss://)
        raise ConfigError(f"{setting}={shown}: a parameter Redis does not take here ({exc})") from None
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        text = str(exc)
        if "HELLO must be called" in text:  # RESP3 handshake without credentials
            raise ConfigError(
                f"{setting}={shown}: this Redis requires a password; put it in the URL "
                "(redis://:PASSWORD@host:port/db)"
            ) from None
        if "without any password" in text or "no password is set" in text:
            raise ConfigError(
                f"{setting}={shown}: this Redis has no password; remove it from the URL"
            ) from None
        raise ConfigError(f"{setting}={shown}: Redis refused the user name or password ({text})") from None
    except redis.ResponseError as exc:
        text = str(exc)
        if "NOAUTH" in text or "Authentication required" in text:
            raise ConfigError(
                f"{setting}={shown}: this Redis requires a password; put it in the URL "
                "(redis://:PASSWORD@host:port/db)"
            ) from None
        if "DB index is out of range" in text:
            db = urlsplit(url).path.lstrip("/") or "0"
            raise ConfigError(
                f"{setting}={shown}: this Redis has no database {db} (DB index out of range)"
            ) from None
        raise ConfigError(f"{setting}={shown}: Redis answered an error: {text}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        text = _first_line(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            raise ConfigError(
                f"{setting}={shown}: the Redis server's TLS certificate is not trusted: name the CA that "
                f"signed it in the URL (rediss://...?ssl_ca_certs=/path/ca.pem) ({text})"
            ) from None
        raise ConfigError(f"{setting}={shown}: cannot reach Redis ({text})") from None
    try:
        if is_cluster_node(client):
            _check_cluster(client, url, f"{setting}={shown}", timeout_s, durable)
        elif durable:
            check_durable(client, f"{setting}={shown}")
    finally:
        client.close()


def _check_cluster(client: redis.Redis, url: str, where: str, timeout_s: float, durable: bool) -> None:
    """A Redis Cluster must serve every slot; ``durable``: each primary must be."""
    info = cluster_info(client)
    state, served = info.get("cluster_state", "?"), info.get("cluster_slots_ok", "?")
    if state != "ok":
        raise ConfigError(
            f"{where}: this Redis Cluster is not ok (cluster_state {state}, {served} of 16384 slots "
            "served): finish its set-up (redis-cli --cluster create / fix) or wait for its failover"
        )
    if not durable:
        return
    cluster = RedisCluster.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        for node in cast(Any, cluster).get_primaries():
            conn = cluster.get_redis_connection(node)
            check_durable(conn, f"{where} (cluster primary {node.name})")
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise ConfigError(
            f"{where}: cannot reach a node of this Redis Cluster ({_first_line(exc)})"
        ) from None
    finally:
        cluster.close()


VOLATILE_OPT_IN = "MW_ALLOW_VOLATILE_STORE=1"


def check_durable(client: redis.Redis, where: str) -> None:
    """Refuse a store that acknowledges writes it can still lose in a crash: one
    without an append-only file synced on every write (``appendonly yes``,
    ``appendfsync always``). Resumed from such a store, a worker would stop at
    takeover (the commit witness finds the loss: ``witness.py``); the opt-in
    (``MW_ALLOW_VOLATILE_STORE``) is for stores that are durable in a way this check
    cannot see, or for runs that accept that stop."""
    fix = f"set appendonly yes and appendfsync always in its configuration, or accept it: {VOLATILE_OPT_IN}"
    try:
        raw = client.config_get("append*")
    except redis.ResponseError as exc:
        raise ConfigError(
            f"{where}: cannot read this Redis's persistence settings (CONFIG GET: {_first_line(exc)}); "
            f"if it keeps every acknowledged write through a crash, say so with {VOLATILE_OPT_IN}"
        ) from None
    conf = {_text(k): _text(v) for k, v in raw.items()}
    aof, fsync = conf.get("appendonly", "no"), conf.get("appendfsync", "everysec")
    if aof != "yes":
        raise ConfigError(f"{where}: this Redis keeps no append-only file (appendonly {aof}): {fix}")
    if fsync != "always":
        raise ConfigError(
            f"{where}: this Redis can lose acknowledged writes in a crash (appendfsync {fsync}): {fix}"
        )


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
