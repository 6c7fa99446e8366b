"""Which local process holds the other end of a loopback TCP connection (Linux ``/proc``).

A request that presents no key of the run (none, or one signed for another run) cannot say
who sent it. The kernel can: the client's socket is a line of ``/proc/net/tcp`` (or
``tcp6``) with the client's address as its local end, and its inode is a descriptor of the
process that holds it (``/proc/<pid>/fd``). The harness asks this only for such requests,
and only of the processes it may own, so the cost (a few reads of ``/proc``) is paid where
the answer matters.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable

__all__ = ["process_groups", "sender"]


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
