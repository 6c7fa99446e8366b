"""The job mailer's settings for a deployment on PostgreSQL: the same app, its database the
one ``JOBS_DATABASE_DSN`` names (a libpq connection string, as a deployment's environment
gives it), through Django's PostgreSQL backend on psycopg 3."""

import os

from psycopg.conninfo import conninfo_to_dict

from scenarios.django_mailer.settings import *  # noqa: F403

_DSN = conninfo_to_dict(os.environ.get("JOBS_DATABASE_DSN", "dbname=jobs"))

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _DSN["dbname"],
        "HOST": _DSN.get("host", ""),  # a Unix socket's directory, or a host name
        "PORT": _DSN.get("port", ""),
        "USER": _DSN.get("user", ""),
    }
}
