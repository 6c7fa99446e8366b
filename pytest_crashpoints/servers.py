"""Private servers for tests: Redis and PostgreSQL, each in a temporary directory of its own.

What a queue's worker or an agent's database needs beside the crash test, without a system
service: :func:`redis_server` and :func:`postgres_server` start the server on a Unix socket
(no TCP port, nothing of a system installation used or touched), yield where to connect
(:class:`RedisServer`, :class:`PostgresServer`), and stop and reap it after the block; a test
process killed outright takes its servers with it. They work as root or not (PostgreSQL,
which refuses root, then runs as the ``postgres`` user).

With the plugin on, the fixtures ``crashpoints_redis`` (one server per test) and
``crashpoints_postgres`` (one per session: make a database per test, or per case from a
template: :meth:`PostgresServer.case_database`, a fresh database per case of a crash
test) give the same objects, and skip the test, saying what to install, where the server
is not installed. :func:`find_redis_server` and :func:`find_postgres_bin` say whether it is,
for a ``skipif``. A server that is not installed or does not start raises
:class:`~pytest_crashpoints.errors.ServerError`.
"""

from ._exports import show_public_home
from ._servers.postgres_cases import PostgresCaseDatabase
from ._servers.postgres_server import PostgresServer, find_postgres_bin, postgres_server
from ._servers.redis_server import RedisServer, find_redis_server, redis_server

__all__ = [
    "PostgresCaseDatabase",
    "PostgresServer",
    "RedisServer",
    "find_postgres_bin",
    "find_redis_server",
    "postgres_server",
    "redis_server",
]

show_public_home(__name__, __all__)
