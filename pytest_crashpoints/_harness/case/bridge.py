"""A worker that is a command, in any language: the bridge that runs it as a harness worker.

``CommandWorker(["node", "worker.js"])`` is a worker function (``worker(message, ctx)``), and
``CommandRecovery([...])`` a recovery function (``recover(ctx)``): the harness runs them as it
runs any worker, in a real subprocess forked through the fork server, armed with the
schedule's faults, counted, killed, paused, timed out. That process is the *bridge*. It:

1. binds the fail-point protocol (``failpoint_server.py``) and a relay in front of each
   provider's server (``relay.py``), on loopback ports;
2. starts the command in its own process group, with the message as JSON on its standard
   input and in ``CRASHPOINTS_MESSAGE``, its output to ``logs/<process>.stdout`` and
   ``.stderr`` in the run directory, and this environment:

   ``CRASHPOINTS_URL`` (the protocol), ``CRASHPOINTS_<PROVIDER>_URL`` (the relays),
   ``CRASHPOINTS_<PROVIDER>_KEY`` (this process's keys), ``CRASHPOINTS_RUN_DIR``,
   ``CRASHPOINTS_PROCESS``, ``CRASHPOINTS_TASK_ID``, ``CRASHPOINTS_NOW`` (harness seconds),
   and a ``PYTHONPATH`` that gives every Python process of the command the hooks a Python
   worker has in its own process (``program_hooks.py``: its commits, syncs and own fail
   points, forwarded here);
3. serves both until the command exits: exit status 0 is a completed worker (the message
   acknowledged); anything else, or a line of its standard output that begins with the word
   ``nack``, raises :class:`~pytest_crashpoints.errors.CommandFailed` (as a Python worker
   that raises: the message stays unacknowledged, and is delivered again), with the end of
   its standard error or the line.

A kill at a fail point kills the bridge with its process group, the command included, while
the command waits for an answer (from the protocol, or from a relay at B).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import CommandFailed, HarnessUsageError
from .context import CaseEnv, Context

__all__ = [
    "CommandRecovery",
    "CommandWorker",
    "command_env",
    "command_output",
    "expanded",
    "nacked",
]

#: Lines of a command's output the timeline shows, per stream.
OUTPUT_LINES = 3
#: The word that begins a line of a command's standard output that says "not done".
NACK = "nack"
#: The largest message also passed in ``CRASHPOINTS_MESSAGE`` (an environment variable
#: holds at most 128 KiB on Linux); a larger one is on standard input only.
ENV_MESSAGE_LIMIT = 64 * 1024


def _env_name(provider: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in provider.upper())


def message_json(message: object, *, index: int | None = None) -> str:
    """``message`` as JSON; :class:`HarnessUsageError` if it is not JSON data."""
    try:
        return json.dumps(message, sort_keys=True)
    except (TypeError, ValueError) as exc:
        which = "a message" if index is None else f"message {index}"
        raise HarnessUsageError(
            f"{which} ({message!r}) cannot be sent to a command as JSON ({exc}); use strings, "
            "numbers, booleans, None, lists and dicts."
        ) from exc


@dataclasses.dataclass(frozen=True)
class CommandWorker:
    """A worker that runs ``argv`` for each message (see the module docstring).

    ``cwd`` is the command's working directory (default: the test's); ``env`` adds
    variables to its environment, whose values may name the variables the harness gives the
    process (``{"MAIL_API_URL": "${CRASHPOINTS_EMAIL_URL}"}``: a program's own names for
    them, each process's values). Raises :class:`HarnessUsageError` for an empty command or
    a program that is not found.
    """

    argv: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from ..._process.program import check_command

        object.__setattr__(self, "argv", check_command(self.argv, what="command"))

    def __call__(self, message: Any, ctx: Context) -> object:
        return run_bridge(self.argv, ctx, message=message, cwd=self.cwd, extra=self.env)


@dataclasses.dataclass(frozen=True)
class CommandRecovery:
    """A recovery that runs ``argv`` (see :class:`CommandWorker`); no message."""

    argv: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from ..._process.program import check_command

        object.__setattr__(self, "argv", check_command(self.argv, what="recover_command"))

    def __call__(self, ctx: Context) -> object:
        return run_bridge(self.argv, ctx, message=None, cwd=self.cwd, extra=self.env)


def _task_info(env: CaseEnv, worker_id: str, task_id: str) -> dict[str, object]:
    """What ``GET /tasks/{task_id}`` answers: the task's authority now and this process's
    keys for it (none once revoked)."""
    if task_id not in env.tasks:
        raise KeyError("not a task of this case")
    # A context per request: the serving threads must not share SQLite connections.
    ctx = Context(env, worker_id)
    try:
        authority = ctx.authority(task_id)
        if authority is None:
            return {"task_id": task_id, "authority": None, "keys": {}}
        return {
            "task_id": task_id,
            "authority": {
                "tenant_id": authority.tenant_id,
                "credential_scope": authority.scope_text,
                "policy_version": authority.policy_version,
            },
            "keys": {s.name: ctx.api_key(s.name, authority) for s in env.providers},
        }
    finally:
        ctx.close()


def command_env(ctx: Context, *, protocol: str, relays: Mapping[str, str]) -> dict[str, str]:
    """The variables the harness gives a command: ``ctx.sdk_env()`` with the relays as the
    providers' addresses, ``CRASHPOINTS_URL`` and ``CRASHPOINTS_NOW``."""
    env = ctx.sdk_env()
    for name, url in relays.items():
        env[f"CRASHPOINTS_{_env_name(name)}_URL"] = url
        if ctx.env.spec(name).is_model:  # what the SDKs read: the relay too, not the server
            env["OPENAI_BASE_URL"], env["ANTHROPIC_BASE_URL"] = url + "/v1", url
        if url.startswith("smtp://"):  # a mail relay: its host and port too
            host, _, port = url[len("smtp://"):].partition(":")
            env[f"CRASHPOINTS_{_env_name(name)}_HOST"] = host
            env[f"CRASHPOINTS_{_env_name(name)}_PORT"] = port
    env["CRASHPOINTS_URL"] = protocol
    env["CRASHPOINTS_NOW"] = repr(ctx.now())
    return env


def expanded(extra: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """``extra`` (a command's own variables) with each ``${NAME}`` or ``$NAME`` of a variable
    the harness gives the process (``given``) replaced by its value; anything else is left
    as it is (``$$`` is one ``$``)."""
    import string

    return {name: string.Template(value).safe_substitute(given) for name, value in extra.items()}


def run_bridge(
    argv: Sequence[str],
    ctx: Context,
    *,
    message: object,
    cwd: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Run ``argv`` for ``message`` (``None``: a recovery) as this worker process (the
    bridge); return ``{"exit": 0}`` or raise :class:`CommandFailed`."""
    import contextlib
    import secrets

    from ..._process.program import describe_exit, start_command, tail
    from .failpoint_server import FailpointServer
    from .program_hooks import hook_variables
    from .relay import Relay
    from .smtp_relay import SmtpRelay

    env_, who = ctx.env, ctx.worker_id
    logs = env_.run_dir.logs
    logs.mkdir(parents=True, exist_ok=True)
    # The credential of this process alone: its URLs end in it, and nothing else on the
    # machine can use the fail points, read its keys or send through its relays.
    credential = secrets.token_urlsafe(32)
    with contextlib.ExitStack() as stack:
        # Bound now, served once the command has started: it is started before any thread.
        protocol = stack.enter_context(
            FailpointServer(
                now=ctx.now,
                epoch=ctx.clock.epoch(),
                tasks=lambda task: _task_info(env_, who, task),
                credential=credential,
            )
        )
        relays = {
            spec.name: stack.enter_context(
                Relay(env_.url(spec.name), timeout=env_.http_timeout, credential=credential)
            )
            for spec in env_.providers
            if not spec.speaks_smtp
        }
        mail_relays = {
            spec.name: stack.enter_context(
                SmtpRelay(ctx.smtp_address(spec.name), timeout=env_.http_timeout)
            )
            for spec in env_.providers
            if spec.speaks_smtp
        }
        given = command_env(
            ctx, protocol=protocol.url,
            relays={
                **{n: r.url for n, r in relays.items()},
                **{n: r.url for n, r in mail_relays.items()},
            },
        )
        variables = dict(os.environ)
        variables.update(expanded(extra or {}, given))
        variables.update(given)
        variables.update(hook_variables(env_, variables))
        stdin = None
        if message is not None:
            text = message_json(message)
            stdin = logs / f"{who}.message.json"
            stdin.write_text(text + "\n", encoding="utf-8")
            if len(text) <= ENV_MESSAGE_LIMIT:
                variables["CRASHPOINTS_MESSAGE"] = text
        process = start_command(
            argv,
            env=variables,
            stdin=stdin,
            stdout=logs / f"{who}.stdout",
            stderr=logs / f"{who}.stderr",
            cwd=cwd,
        )
        protocol.start()
        for relay in relays.values():
            relay.start()
        for mail_relay in mail_relays.values():
            mail_relay.start()
        code = process.wait()
    if code != 0:
        lines, _ = tail(logs / f"{who}.stderr", OUTPUT_LINES)
        said = f"; its stderr ends: {' | '.join(lines)}" if lines else "; its stderr is empty"
        raise CommandFailed(f"the command {' '.join(argv)} {describe_exit(code)}{said}")
    said_nack = nacked(logs / f"{who}.stdout") if message is not None else None
    if said_nack is not None:
        raise CommandFailed(
            f"the command {' '.join(argv)} exited with status 0 but printed {said_nack!r}: "
            "the message is not done, and is delivered again"
        )
    return {"exit": 0}


def nacked(stdout: Path) -> str | None:
    """The first line of a command's standard output that says its message is not done
    (``nack``, alone or followed by a space and anything: ``nack job-7``), if any."""
    try:
        with open(stdout, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                text = line.rstrip("\r\n")
                if text == NACK or text.startswith(NACK + " "):
                    return text[:200]
    except OSError:
        return None
    return None


def command_output(env: CaseEnv, who: str) -> list[str]:
    """For the timeline: the last lines a command of process ``who`` wrote to each stream
    (nothing for a process that ran no command)."""
    from ..._process.program import tail

    out: list[str] = []
    for stream in ("stdout", "stderr"):
        path = env.run_dir.logs / f"{who}.{stream}"
        lines, total = tail(path, OUTPUT_LINES)
        if total > len(lines):
            out.append(f"{who} {stream}: ... ({total - len(lines)} more in logs/{path.name})")
        out += [f"{who} {stream}: {line}" for line in lines]
    return out
