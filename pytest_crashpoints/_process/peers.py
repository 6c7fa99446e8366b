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

#: Each socket of this process already looked at (by descriptor and inode): what is on its
#: other end, described, or "" when that is this process or an allowed one.
_seen: dict[tuple[int, int], str] = {}
#: The socket inodes each allowed process held when last read (refreshed on a miss).
_held: dict[int, frozenset[int]] = {}


def foreign_connection(allowed: Collection[int]) -> str | None:
    """A connected stream socket of this process whose other end no process in ``allowed``
    holds, described (``"a connection to pid 4242 (redis-server)"``), or None when there is
    none. Listening sockets (nobody on the other side yet), datagram sockets and pipes are not
    connections. Where ``/proc`` cannot be read, says so (the caller must assume the worst)."""
    try:
        entries = os.listdir("/proc/self/fd")
    except OSError:
        return "the process's descriptors cannot be read here"
    for name in entries:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if not target.startswith("socket:["):
            continue
        key = (int(name), int(target[8:-1]))
        if key not in _seen:
            _seen[key] = _other_end(key[0], allowed) or ""
        if _seen[key]:
            return _seen[key]
    return None


def _other_end(fd: int, allowed: Collection[int]) -> str | None:
    """What holds the other end of stream socket ``fd``: "" for this process or one of
    ``allowed``, a description for anything else, None when it is no connected stream
    socket (a listening one, a datagram socket, one not connected)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    with sock:
        try:
            if sock.type != socket.SOCK_STREAM or sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                return None
            if sock.family == socket.AF_UNIX:
                pid = _peer_pid(sock)
                if pid == 0:
                    return None
                return "" if pid in (os.getpid(), *allowed) else f"a connection to {_describe(pid)}"
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            host, port = sock.getpeername()[:2]
        except OSError:
            return None  # not connected
    if not ipaddress.ip_address(host).is_loopback:
        return f"a connection to {host}:{port}"
    if any(_listens(pid, port) for pid in (os.getpid(), *allowed)):
        return ""
    return f"a connection to {host}:{port} (not the harness's)"


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


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (any address)."""
    wanted = {inode for inode in _listening(port)}
    if not wanted:
        return False
    held = _held.get(pid)
    if held is None or not wanted & held:
        held = _held[pid] = _sockets_of(pid)
    return bool(wanted & held)


def _listening(port: int) -> set[int]:
    """The inodes of the listening TCP sockets on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as lines:
            next(lines, None)
            for line in lines:
                fields = line.split()
                # state 0A: LISTEN; the local address ends in the port, in hex
                if len(fields) > 9 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                    found.add(int(fields[9]))
    return found


def _sockets_of(pid: int) -> frozenset[int]:
    inodes = set()
    folder = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            with contextlib.suppress(OSError):
                target = os.readlink(f"{folder}/{name}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return frozenset(inodes)


def outside_reach(fds: Iterable[int], allowed: Collection[int]) -> tuple[str | None, bool]:
    """The first of ``fds`` (descriptors an event loop watches) that something outside this
    process could make ready, described, and whether that is something real (else one of
    ``allowed``: the harness's own servers, which answer what is asked and nothing else).
    ``(None, False)`` when only this process can: each is one end of a socket pair it made,
    a pipe whose both ends it holds, or an ``eventfd`` (with no child, nobody else holds
    them)."""
    wanted = list(fds)
    if not wanted:
        return None, False
    try:
        targets = {}
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                targets[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        return "descriptors that cannot be read here", True
    pipes = [t for t in targets.values() if t.startswith("pipe:[")]
    world = None
    for fd in wanted:
        target = targets.get(fd, "")
        if target == "anon_inode:[eventfd]" or (target.startswith("pipe:[")
                                                 and pipes.count(target) > 1):
            continue
        end = _watched_end(fd, allowed) if target.startswith("socket:[") else "real"
        if end == "real":
            return f"descriptor {fd} ({target or 'closed'})", True
        if end == "world" and world is None:
            world = f"a connection to the harness (descriptor {fd})"
    return world, False


def _watched_end(fd: int, allowed: Collection[int]) -> str:
    """What is on the other end of watched socket ``fd``: ``"own"`` (a pair this process
    made), ``"world"`` (a connection to one of ``allowed``) or ``"real"`` (anything else,
    a listening socket included: anyone may connect)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return "real"
    with sock:
        try:
            pair = sock.family == socket.AF_UNIX and _peer_pid(sock) == os.getpid()
        except OSError:
            pair = False
    if pair:
        return "own"
    return "world" if _other_end(fd, allowed) == "" else "real"
