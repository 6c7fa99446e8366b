"""The job mailer, in two versions: what a Django app's task that mails one job runs.

- :func:`send_then_mark` sends the job's mail, then marks the job ``sent``. A worker that dies
  between the two (killed after the relay took the mail, before it read the reply) leaves the job
  ``queued``, and the queue's next delivery sends it a second time.
- :func:`claim_then_send` is the fix. It claims the job (``sending``, with the ``Message-ID`` it is
  about to use) in a committed transaction before it sends. It reads the job under a row lock
  taken without waiting (``select_for_update(nowait=True)``): on PostgreSQL two deliveries at
  once could otherwise both read ``queued`` and both claim it (the second's update waits for
  the first's commit, then overwrites it); the second fails at once instead (``DatabaseError``)
  and its message comes back. On SQLite Django leaves the lock out: the settings' ``IMMEDIATE``
  transactions take the database's write lock when they begin. A plain SMTP relay cannot be asked
  whether a mail went out, so a delivery that finds the job ``sending`` parks it for a person
  (``review``, the ``Message-ID`` to look for in the relay's log) instead of sending it again.
  A reply from the relay is an answer: a refusal (``4xx`` or ``5xx``) means the relay did not
  take the mail, so a ``4xx`` puts the job back in the queue and raises (the queue retries it)
  and a ``5xx`` fails it for good. No reply at all (the connection dropped, a timeout) leaves
  it ``sending``: the mail may have gone out.
"""

from __future__ import annotations

import smtplib
from email.utils import make_msgid

from django.core.mail import EmailMessage, send_mail
from django.db import transaction

from scenarios.django_mailer import start_django

SENDER = "billing@example.com"


def send_then_mark(job_id: str) -> str:
    """BUG: send, then mark. A job whose worker died in between is sent again."""
    start_django()
    from scenarios.django_mailer.jobs.models import Job

    job = Job.objects.get(pk=job_id)
    if job.status == "sent":
        return "sent"  # done before: acknowledge the redelivery
    send_mail(job.subject, job.body, SENDER, [job.recipient])
    job.status = "sent"
    job.save(update_fields=["status"])
    return "sent"


def claim_then_send(job_id: str) -> str:
    """The fix: claim (committed), send, mark; a job found claimed is parked for review."""
    start_django()
    from scenarios.django_mailer.jobs.models import Job

    with transaction.atomic():
        job = Job.objects.select_for_update(nowait=True).get(pk=job_id)
        if job.status != "queued":
            if job.status == "sending":  # an earlier delivery may have sent it
                job.status = "review"
                job.save(update_fields=["status"])
            return job.status
        job.status = "sending"
        job.message_id = make_msgid(domain="example.com")
        job.save(update_fields=["status", "message_id"])
    mail = EmailMessage(
        job.subject, job.body, SENDER, [job.recipient], headers={"Message-ID": job.message_id}
    )
    try:
        mail.send()
    except smtplib.SMTPResponseException as refused:
        if refused.smtp_code >= 500:
            Job.objects.filter(pk=job_id, status="sending").update(status="failed")
            return "failed"
        Job.objects.filter(pk=job_id, status="sending").update(status="queued")
        raise  # a transient refusal: the queue delivers the job again
    Job.objects.filter(pk=job_id).update(status="sent")
    return "sent"
