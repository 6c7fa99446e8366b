"""Which local process holds the other end of a connection (Linux ``/proc``).

A request that presents no key of the run (none, or one signed for another run) cannot say
who sent it. The kernel can: the client's socket is a line of ``/proc/net/tcp`` (or
``tcp6``) with the client's address as its local end, and its inode is a descriptor of the
process that holds it (``/proc/<pid>/fd``). The harness asks this only for such requests,
and only of the processes it may own, so the cost (a few reads of ``/proc``) is paid where
the answer matters (:func:`sender`).

A worker asks the same of itself before it skips a wait (``waits.py``): whether it is
connected to anything but itself and the harness (:func:`foreign_connection`: a real broker
or database changes with time and with other clients, and its clock is real), and whether a
descriptor an event loop watches can be made ready from outside (:func:`outside_reach`). A
Unix socket names its other end's process (``SO_PEERCRED``); a loopback TCP connection names
its port, and the process holding that port's listening socket is found in ``/proc``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Collection, Iterable

__all__ = ["foreign_connection", "outside_reach", "process_groups", "sender"]


def _hex_address(host: str, port: int) -> str:
    """An address as ``/proc/net/tcp{,6}`` prints it: the address in the kernel's byte order,
    then the port, both in upper-case hex."""
    address = ipaddress.ip_address(host)
    packed = address.packed
    if address.version == 4:
        text = packed[::-1].hex()
    else:  # four 32-bit words, each in host (little-endian) order
        text = "".join(packed[i : i + 4][::-1].hex() for i in range(0, 16, 4))
    return f"{text.upper()}:{port:04X}"


def _socket_inode(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The inode of the client's socket of the connection ``client`` -> ``server``."""
    host = client[0]
    table = "/proc/net/tcp6" if ":" in host else "/proc/net/tcp"
    local = _hex_address(host, client[1])
    remote = _hex_address(server[0], server[1])
    if ":" in host and ":" not in server[0]:
        return None
    try:
        with open(table, encoding="ascii") as lines:
            next(lines, None)
            for line in lines:
                fields = line.split()
                if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                    return int(fields[9]) or None
    except OSError:
        return None
    return None


def _holds(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"{folder}/{name}") == target:
                return True
    return False


def process_groups(groups: Iterable[int]) -> list[int]:
    """The pids of every process whose process group is one of ``groups``."""
    wanted = set(groups)
    found: list[int] = []
    if not wanted:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and int(fields[2]) in wanted:
            found.append(int(name))
    return found


def sender(
    client: tuple[str, int], server: tuple[str, int], candidates: Iterable[int]
) -> int | None:
    """Which of ``candidates`` (pids) holds the client end of the TCP connection from
    ``client`` to ``server``; None if none of them does, or this platform cannot tell."""
    if not os.path.isdir("/proc/net"):
        return None
    with contextlib.suppress(ValueError, OSError):
        socket.inet_pton(socket.AF_INET6 if ":" in client[0] else socket.AF_INET, client[0])
        inode = _socket_inode(client, server)
        if inode is None:
            return None
        for pid in candidates:
            if _holds(pid, inode):
                return pid
    return None


# -- a worker's own connections ---------------------------------------------------------------

#: An address (host, port) of the case's own servers: the harness's fake providers.
Address = tuple[str, int]

#: What each socket of this process is, once looked at (by descriptor and inode): its
#: ``kind`` ("own", "world", "none", "tcp" or a description of something real), and for a
#: TCP socket its own port, whether it listens, and the loopback port of its other end.
_Socket = tuple[str, int, bool, int | None]
_seen: dict[tuple[int, int], _Socket] = {}


def foreign_connection(allowed: Collection[int], world: Collection[Address]) -> str | None:
    """A connected stream socket of this process to something real, described (``"a
    connection to pid 4242 (redis-server)"``), or None when there is none: every connection
    leads to this process (a socket pair, or both ends of a loopback connection, as a server
    run in a thread with its client), a process in ``allowed`` (a Unix socket: the
    harness, the fork server) or an address in ``world`` (a loopback server of the case's
    providers). Listening sockets (nobody on the other side yet), datagram sockets and pipes
    are not connections. Where ``/proc`` cannot be read, says so (the caller assumes the
    worst)."""
    try:
        entries = os.listdir("/proc/self/fd")
    except OSError:
        return "the process's descriptors cannot be read here"
    sockets = []
    for name in entries:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith("socket:["):
            sockets.append(_socket(int(name), target, allowed, world))
    # Both ends of a connection within this process are connected sockets of it (a port it
    # listens on proves nothing: a worker inherits its parent's listening sockets).
    mine = {port for _, port, listening, _ in sockets if port and not listening}
    for kind, _, _, peer in sockets:
        if kind == "tcp" and peer not in mine:
            return f"a connection to 127.0.0.1:{peer}"
        if kind not in ("own", "world", "none", "tcp"):
            return kind
    return None


def _socket(fd: int, target: str, allowed: Collection[int], world: Collection[Address]) -> _Socket:
    """What socket ``fd`` (``target``: its ``/proc`` link) is, cached."""
    key = (fd, int(target[8:-1]))
    seen = _seen.get(key)
    if seen is None:
        seen = _seen[key] = _classify(fd, allowed, world)
    return seen


def _classify(fd: int, allowed: Collection[int], world: Collection[Address]) -> _Socket:
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return "none", 0, False, None
    with sock:
        try:
            if sock.type != socket.SOCK_STREAM:
                return "none", 0, False, None
            listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            if sock.family == socket.AF_UNIX:
                if listening:
                    return "none", 0, True, None
                pid = _peer_pid(sock)
                if pid in (0, os.getpid()):
                    return ("own" if pid else "none"), 0, False, None
                kind = "world" if pid in allowed else f"a connection to {_describe(pid)}"
                return kind, 0, False, None
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return "none", 0, False, None
            port = int(sock.getsockname()[1])
            if listening:
                return "none", port, True, None
            host, peer = sock.getpeername()[:2]
        except OSError:
            return "none", 0, False, None  # not connected
    if (host, peer) in world or (
        ipaddress.ip_address(host).is_loopback and any(p == peer for _, p in world)
    ):
        return "world", port, False, None
    if ipaddress.ip_address(host).is_loopback:
        return "tcp", port, False, int(peer)  # this process's own, or something real
    return f"a connection to {host}:{peer}", port, False, None


def _peer_pid(sock: socket.socket) -> int:
    """The pid on the other end of a connected Unix socket (the process that created the
    pair, or the server that listened), 0 when unknown."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", raw)[0]
    return pid


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return f"pid {pid} ({comm.read().strip()})"
    except OSError:
        return f"pid {pid}"


def outside_reach(
    fds: Iterable[int], allowed: Collection[int], world: Collection[Address]
) -> str | None:
    """The first of ``fds`` (descriptors an event loop watches) that something outside this
    process could make ready, described; None when only this process can: each is one end
    of a socket pair it made, a pipe whose both ends it holds, or an ``eventfd`` (with no
    child, nobody else holds them). A connection to the case's providers (``allowed``,
    ``world``) is named as a request in flight."""
    pipes: list[str] | None = None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return f"descriptor {fd}, which cannot be read here"
        if target == "anon_inode:[eventfd]":
            continue
        if target.startswith("pipe:["):
            if pipes is None:
                pipes = _pipes()
            if pipes.count(target) > 1:
                continue
            return f"a pipe (descriptor {fd}) another process may write to"
        if target.startswith("socket:["):
            kind, _, listening, _ = _socket(fd, target, allowed, world)
            if kind == "own":
                continue
            if kind == "world":
                return f"a request in flight to the case's providers (descriptor {fd})"
            if kind in ("none", "tcp"):
                what = "a port anyone may connect to" if listening else "a socket"
                return f"{what} (descriptor {fd})"
            return kind
        return f"descriptor {fd} ({target})"
    return None


def _pipes() -> list[str]:
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{name}")
                if target.startswith("pipe:["):
                    found.append(target)
    return found
