"""Length-prefixed frames over pipes and sockets, shared by the notebook side and the rank server."""

import os
import socket
import struct

_HEADER = struct.Struct("!Q")


def write_frame(fd: int, data: bytes) -> None:
    """Write one frame (8-byte big-endian length, then the bytes) to a blocking file descriptor."""
    for part in (_HEADER.pack(len(data)), data):  # not header + data: that would copy a result of hundreds of MB
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view) :]


class FrameReader:
    """Collects bytes as they arrive (non-blocking reads) and yields whole frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        frames = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + size:
                break
            with memoryview(self._buf) as view:  # one copy of a large frame, not two
                frames.append(bytes(view[_HEADER.size : _HEADER.size + size]))
            del self._buf[: _HEADER.size + size]
        return frames


class LineReader(FrameReader):
    """Collects bytes and yields whole decoded lines; ``flush`` returns a last unterminated line."""

    def feed(self, chunk: bytes) -> list[str]:
        self._buf += chunk
        *lines, rest = self._buf.split(b"\n")
        self._buf = bytearray(rest)
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def flush(self) -> list[str]:
        line, self._buf = self._buf.decode("utf-8", "replace"), bytearray()
        return [line] if line else []


def recv_exact(sock, size: int) -> bytes:
    """Read exactly ``size`` bytes from a blocking socket; raise EOFError if it closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("socket closed")
        data += chunk
    return bytes(data)


def send_msg(sock, data: bytes, fds=()) -> None:
    """Send a frame on a Unix socket, with file descriptors attached to its header."""
    header = _HEADER.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def recv_msg(sock, maxfds: int = 0) -> tuple[bytes, list[int]]:
    """Receive one frame sent by :func:`send_msg`; returns (data, fds)."""
    header, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, maxfds)
    header += recv_exact(sock, _HEADER.size - len(header))
    (size,) = _HEADER.unpack(header)
    return recv_exact(sock, size), fds
