"""HTTPS requests to the test API server over kept-alive connections, one per thread and identity.

The tests poll the API server several times a second for their whole run. A new connection per request costs a
TLS handshake with a client certificate on both sides (milliseconds of CPU in this process and in kube-apiserver)
and urllib's opener set up again; on the 2-core machine the suite runs on, that was CPU the operator and the
controllers under test did not get. A connection kept per thread (http.client is not thread-safe) costs one
handshake for many requests.

A kept connection the server has closed since its last use (an idle timeout, the API server stopped for an outage
test and started again) is noticed before it is used again, and a request that finds it dropped anyway is sent once
more on a new connection, as urllib3 does for the kubernetes client: the server did not answer it. Errors stay
those of http.client and ssl (OSError), as urllib's were.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading

# What a request on a connection the server dropped while idle fails with before any answer.
DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class Connections:
    """Kept-alive HTTPS connections to one host and port, per thread and per TLS context."""

    def __init__(self) -> None:
        self._local = threading.local()

    def request(self, host: str, port: int, context: ssl.SSLContext, method: str, path: str, body: bytes | None,
                headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        key = (host, port, id(context))
        conns: dict = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(key)
        reused = conn is not None and conn.sock is not None and not _dropped(conn)
        if not reused:
            if conn is not None:
                conn.close()
            conn = conns[key] = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
        conn.timeout = timeout
        try:
            return _send(conn, method, path, body, headers)
        except DROPPED:
            conn.close()
            if not reused:
                raise
            return _send(conn, method, path, body, headers)  # a fresh connection (http.client reconnects)
        except Exception:
            conn.close()
            raise

    def close(self) -> None:
        """Close this thread's connections (others close when their threads end or on their next failure)."""
        for conn in self._local.__dict__.pop("conns", {}).values():
            conn.close()


def _send(conn: http.client.HTTPSConnection, method: str, path: str, body: bytes | None,
          headers: dict[str, str]) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    with conn.getresponse() as resp:
        return resp.status, resp.read()


def _dropped(conn: http.client.HTTPSConnection) -> bool:
    """Whether an idle connection was closed by the server: its socket is readable (EOF) with no request out."""
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
