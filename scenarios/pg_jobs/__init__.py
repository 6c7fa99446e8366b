"""The four-column job mailer (``scenarios/jobs_mailer.py``) with its jobs in PostgreSQL: on
psycopg 3 (:mod:`scenarios.pg_jobs.psycopg_mailer`) and through SQLAlchemy on it
(:mod:`scenarios.pg_jobs.sqlalchemy_mailer`). Nothing of the harness in either: a crash test
changes only the API's URL and key and the database's connection string."""

#: The agent's table, applied once to the template each case's database is cloned from.
SCHEMA = "CREATE TABLE jobs (id text PRIMARY KEY, recipient text, body text, status text)"
