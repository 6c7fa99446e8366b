"""The job mailer's Django settings: the database and the SMTP relay from the environment, as
a deployment reads them (here the variables the harness sets in each worker process)."""

import os
from pathlib import Path

SECRET_KEY = "crash-tests-only"
USE_TZ = True
INSTALLED_APPS = ["scenarios.django_mailer.jobs"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": Path(os.environ.get("CRASHPOINTS_RUN_DIR", ".")) / "jobs.sqlite3",
        # Claims take the write lock when they begin: two workers never both read "queued".
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 10},
    }
}

EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = os.environ.get("CRASHPOINTS_SMTP_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("CRASHPOINTS_SMTP_PORT", "25"))
EMAIL_HOST_USER = "apikey"
EMAIL_HOST_PASSWORD = os.environ.get("CRASHPOINTS_SMTP_KEY", "")
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = "billing@example.com"
