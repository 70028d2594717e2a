"""One HTTP/1.1 exchange with the agent, bounded in time and in bytes. Standard library only.

The only place the client touches a socket (AgentClient._request calls exchange()). Its rules,
each a defence against an agent (or whatever answers on its port) that misbehaves:

- one deadline (time.monotonic) for the whole exchange: connecting, sending, and every read
  of the answer, each socket operation given only the time left, so an answer trickled a byte
  at a time ends at the deadline (TimeoutError), not when the trickle stops;
- bytes bounded: the status line and headers at most MAX_HEAD_BYTES and MAX_HEADERS lines, the
  body at most `max_bytes` (a Content-Length above it is refused before reading the body; a
  body without one, or chunked, is read only up to it);
- no redirect is followed: only a 2xx answer is an answer; any other status is HttpStatus
  (a 3xx included), so the bearer token only ever goes to the base URL's host;
- `Connection: close`, one request per connection; proxies from the environment are not used
  (the agent is on the trainer's node).

Failures raise: HttpStatus (an answer that is not 2xx), AnswerError (a ValueError: a malformed
or oversized answer), TimeoutError or another OSError (the network). The caller turns them
into its fallback. Name resolution is the system's and is not bounded by the deadline: give
the agent's address as an IP literal (the default, 127.0.0.1) to bound every step.
"""

import re
import socket
import ssl
import time
from typing import Dict, List, Optional, Tuple
from urllib.parse import SplitResult

MAX_HEAD_BYTES = 32 * 1024  # the status line and the headers of an answer, at most
MAX_HEADERS = 64            # header lines of an answer, at most
RECV_BYTES = 64 * 1024      # one read from the socket, at most
MAX_CHUNK_LINE_BYTES = 1024  # a chunk-size line of a chunked body, at most

_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-9][0-9]{2})(?: [\x20-\x7e\x80-\xff]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class HttpStatus(Exception):
    """The agent answered with a status other than 2xx (`status`, an int)."""

    def __init__(self, status: int) -> None:
        super().__init__("the agent answered HTTP %d" % status)
        self.status = status


class AnswerError(ValueError):
    """An answer that is not HTTP the client takes: malformed, or past a bound."""


class _Conn:
    """A socket whose every operation is bounded by one deadline (time.monotonic)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.read_bytes = 0  # bytes received so far

    def _left_s(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the agent's answer did not end within the deadline")
        return left

    def send(self, data: bytes) -> None:
        self.sock.settimeout(self._left_s())  # sendall: the timeout bounds the whole call
        self.sock.sendall(data)

    def recv(self) -> bytes:
        self.sock.settimeout(self._left_s())
        data = self.sock.recv(RECV_BYTES)
        self.read_bytes += len(data)
        return data


def _connect(url: SplitResult, deadline: float) -> socket.socket:
    host = url.hostname or "127.0.0.1"
    port = url.port or (443 if url.scheme == "https" else 80)
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left to connect to the agent")
    sock = socket.create_connection((host, port), timeout=left)
    if url.scheme == "https":
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    return sock


def _request_bytes(url: SplitResult, method: str, path: str, headers: Dict[str, str],
                   body: Optional[bytes]) -> bytes:
    host = url.netloc.rpartition("@")[2]  # as urllib sends it: host[:port], no userinfo
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: " + host, "Connection: close",
             "Accept: application/json", "Accept-Encoding: identity"]
    lines += ["%s: %s" % kv for kv in headers.items()]
    if body is not None:
        lines.append("Content-Length: %d" % len(body))
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ValueError("a request header holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _read_head(conn: _Conn) -> Tuple[bytearray, int]:
    """The bytes read so far and where the body starts (after the blank line)."""
    buf = bytearray()
    while True:
        data = conn.recv()
        if not data:
            raise AnswerError("the connection closed before the answer's headers ended")
        searched = max(0, len(buf) - 3)
        buf += data
        end = buf.find(b"\r\n\r\n", searched)
        if end >= 0:
            if end + 4 > MAX_HEAD_BYTES:
                break
            return buf, end + 4
        if len(buf) > MAX_HEAD_BYTES:
            break
    raise AnswerError("the answer's headers exceed %d bytes" % MAX_HEAD_BYTES)


def _parse_head(head: bytes) -> Tuple[int, Dict[str, List[bytes]]]:
    lines = head.split(b"\r\n")
    m = _STATUS_LINE.fullmatch(lines[0])
    if m is None:
        raise AnswerError("not an HTTP/1.x status line: %.80r" % (lines[0],))
    fields = [line for line in lines[1:] if line]
    if len(fields) > MAX_HEADERS:
        raise AnswerError("the answer has more than %d headers" % MAX_HEADERS)
    headers: Dict[str, List[bytes]] = {}
    for line in fields:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            raise AnswerError("a malformed header line: %.80r" % (line,))
        headers.setdefault(name.decode("ascii").lower(), []).append(value.strip(b" \t"))
    return int(m.group(1)), headers


def _content_length(headers: Dict[str, List[bytes]]) -> Optional[int]:
    values = set(headers.get("content-length", []))
    if not values:
        return None
    if len(values) > 1:
        raise AnswerError("differing Content-Length headers")
    value = values.pop()
    if not value.isdigit() or len(value) > 18:
        raise AnswerError("a malformed Content-Length: %.40r" % (value,))
    return int(value)


def _chunked(headers: Dict[str, List[bytes]]) -> bool:
    codings = b",".join(headers.get("transfer-encoding", [])).lower()
    if not codings:
        return False
    if [c.strip() for c in codings.split(b",")] != [b"chunked"]:
        raise AnswerError("a Transfer-Encoding other than chunked: %.40r" % (codings,))
    return True


def _read_sized(conn: _Conn, buf: bytearray, length: int, max_bytes: int) -> bytes:
    if length > max_bytes:
        raise AnswerError("the answer's %d bytes exceed the cap of %d" % (length, max_bytes))
    while len(buf) < length:
        data = conn.recv()
        if not data:
            raise AnswerError("the connection closed after %d of the answer's %d bytes"
                              % (len(buf), length))
        buf += data
    return bytes(buf[:length])


def _read_to_close(conn: _Conn, buf: bytearray, max_bytes: int) -> bytes:
    while len(buf) <= max_bytes:
        data = conn.recv()
        if not data:
            return bytes(buf)
        buf += data
    raise AnswerError("the answer exceeds the cap of %d bytes" % max_bytes)


def _dechunk(raw: bytearray, max_bytes: int) -> Optional[bytes]:
    """The body of a complete chunked encoding in `raw`, or None while it is incomplete.
    Trailers are skipped. Raises AnswerError when malformed or past max_bytes."""
    body = bytearray()
    at = 0
    while True:
        eol = raw.find(b"\r\n", at, at + MAX_CHUNK_LINE_BYTES)
        if eol < 0:
            if len(raw) - at >= MAX_CHUNK_LINE_BYTES:
                raise AnswerError("a chunk-size line too long")
            return None
        size_field = bytes(raw[at:eol]).split(b";", 1)[0].strip()
        if not size_field or len(size_field) > 8 or any(c not in b"0123456789abcdefABCDEF"
                                                        for c in size_field):
            raise AnswerError("a malformed chunk size: %.40r" % (size_field,))
        size = int(size_field, 16)
        at = eol + 2
        if size == 0:
            end = raw.find(b"\r\n\r\n", at - 2)  # the trailer section ends with a blank line
            return bytes(body) if end >= 0 else None
        if len(body) + size > max_bytes:
            raise AnswerError("the chunked answer exceeds the cap of %d bytes" % max_bytes)
        if len(raw) < at + size + 2:
            return None
        if raw[at + size:at + size + 2] != b"\r\n":
            raise AnswerError("a chunk not followed by CRLF")
        body += raw[at:at + size]
        at += size + 2


def _read_chunked(conn: _Conn, buf: bytearray, max_bytes: int) -> bytes:
    # The raw bytes may exceed the body by the chunk framing: allow a bounded overhead.
    raw_cap = 2 * max_bytes + MAX_HEAD_BYTES
    while True:
        body = _dechunk(buf, max_bytes)
        if body is not None:
            return body
        if len(buf) > raw_cap:
            raise AnswerError("the chunked answer's framing exceeds %d bytes" % raw_cap)
        data = conn.recv()
        if not data:
            raise AnswerError("the connection closed inside a chunked answer")
        buf += data


def exchange(url: SplitResult, method: str, path: str, headers: Dict[str, str],
             body: Optional[bytes], deadline: float, max_bytes: int) -> bytes:
    """The body of a 2xx answer to one request, within `deadline` (time.monotonic) and
    `max_bytes`. `path` is the request target (with its query). Raises as the module doc says.
    """
    if url.scheme not in ("http", "https"):
        raise AnswerError("the agent's URL must be http or https: %r" % (url.scheme,))
    sock = _connect(url, deadline)
    try:
        conn = _Conn(sock, deadline)
        conn.send(_request_bytes(url, method, path, headers, body))
        buf, body_at = _read_head(conn)
        status, answer_headers = _parse_head(bytes(buf[:body_at - 4]))
        if not 200 <= status <= 299:
            raise HttpStatus(status)  # a redirect too: never followed
        rest = bytearray(buf[body_at:])
        if method == "HEAD" or status in (204, 205):
            return b""
        if _chunked(answer_headers):
            if "content-length" in answer_headers:
                raise AnswerError("Transfer-Encoding with Content-Length")
            return _read_chunked(conn, rest, max_bytes)
        length = _content_length(answer_headers)
        if length is not None:
            return _read_sized(conn, rest, length, max_bytes)
        return _read_to_close(conn, rest, max_bytes)
    finally:
        sock.close()
