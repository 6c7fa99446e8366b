"""Private servers a test starts for itself (Redis, PostgreSQL): in a temporary directory, on
a Unix socket, stopped and reaped after. The public names are in
``pytest_crashpoints.servers``."""
