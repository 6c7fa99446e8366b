"""Whether a process can move by itself: its threads and children, read in Linux's ``/proc``.

A wait may be cut short only when nothing could end it or change what follows it. Inside one
process that means: no child process (a child runs on its own), and every other thread asleep
in an untimed wait on a private futex (an idle pool thread, a queue's reader): only a thread
of the same process can wake such a thread, and none runs. Two users:

* ``busywait``: an SQLite lock wait in a worker of a forced interleaving, while every other
  worker is held at a gate, returns at once;
* ``waits``: a worker's timed wait (``time.sleep``, an event loop's timer, a timed
  ``Condition.wait``) is skipped, its length added to the case's clock.

Everything here answers "no" when it cannot tell (another platform, a ``/proc`` it cannot
read): the wait is then real.
"""

from __future__ import annotations

import functools
import os

__all__ = ["frozen", "what_moves"]

#: Linux's system call numbers, by machine: ``read`` and ``futex``.
_SYSCALLS = {"x86_64": (0, 202), "aarch64": (63, 98)}
_FUTEX_PRIVATE_FLAG = 128
_FUTEX_CMD_MASK = 127  # the operation without its private and realtime-clock flags
_FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET


@functools.cache
def _syscalls() -> tuple[int, int] | None:
    """This machine's ``read`` and ``futex`` numbers (None: another machine, nothing frozen)."""
    return _SYSCALLS.get(os.uname().machine)


def frozen(pid: int, moving: int, reading: int | None = None) -> bool:
    """Whether process ``pid`` cannot move by itself (read from ``/proc``): it has no child,
    and every thread but ``moving`` sleeps in an untimed wait on a private futex, which only
    a thread of the process could end. ``reading``: the descriptor ``moving`` (a held
    worker's thread at its gate) must be asleep reading, the harness's release; ``None``:
    ``moving`` is the caller's own thread. One thread alone is frozen: at a gate it can only
    go on to read its release."""
    return what_moves(pid, moving, reading) is None


def what_moves(pid: int, moving: int, reading: int | None = None) -> str | None:
    """What keeps process ``pid`` from being :func:`frozen`, in a few words (a child, a
    thread), or None when it is frozen.

    A thread is read twice, its state and context switches before and after its system call
    (and every thread once before any is read again): a thread that ran in between, or was
    woken and waits for a CPU, shows a count or a state that changed. So at one instant every
    thread was asleep where it was read, and from then on none could wake another."""
    try:
        threads = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
        for tid in threads:
            child = _children(pid, tid)
            if child:
                return f"a child process (pid {child}) can move"
        if threads == [moving]:
            return None
        asleep = {tid for tid in threads if tid != moving or reading is not None}
        if moving not in threads or not asleep:
            return "its threads changed while they were read"
        first = {tid: _sleeping(pid, tid, reading if tid == moving else None) for tid in asleep}
        for tid, switches in first.items():
            if switches is None:
                return f"another thread ({_thread_name(pid, tid)}) can move"
        again = {tid: _switches(pid, tid) for tid in asleep}
        if again != first or sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")) != threads:
            return "another thread moved while it was read"
        return None
    except (OSError, ValueError):
        return "its threads cannot be read here"


def _children(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/children") as children:
        return children.read().split(" ", 1)[0].strip()


def _thread_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as comm:
            return f"{comm.read().strip()}, {tid}"
    except OSError:
        return str(tid)


def _switches(pid: int, tid: int) -> tuple[str, str] | None:
    """The thread's context switches (voluntary, involuntary) if it is asleep, else None."""
    fields = {}
    with open(f"/proc/{pid}/task/{tid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    if not fields.get("State", "").startswith("S"):
        return None
    return fields["voluntary_ctxt_switches"], fields["nonvoluntary_ctxt_switches"]


def _sleeping(pid: int, tid: int, reading: int | None) -> tuple[str, str] | None:
    """The thread's context switches if it sleeps, before and after its system call is read,
    in a wait only its own process can end: an untimed wait on a private futex, or (with
    ``reading``) a read of that descriptor. Else None."""
    numbers = _syscalls()
    before = _switches(pid, tid)
    if numbers is None or before is None:
        return None
    with open(f"/proc/{pid}/task/{tid}/syscall") as file:
        call = file.read().split()
    if len(call) < 5 or not call[0].isdigit():
        return None  # "running", or "-1": not in a system call
    number, args = int(call[0]), [int(arg, 16) for arg in call[1:5]]
    if reading is not None:
        waits = number == numbers[0] and args[0] == reading
    else:
        op, timeout = args[1], args[3]
        waits = (
            number == numbers[1]
            and op & _FUTEX_PRIVATE_FLAG != 0
            and op & _FUTEX_CMD_MASK in _FUTEX_WAITS
            and timeout == 0
        )
    return before if waits and _switches(pid, tid) == before else None
