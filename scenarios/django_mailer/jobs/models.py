"""A job: one mail to send, and how far it got."""

from django.db import models


class Job(models.Model):
    """``status``: ``queued`` (not started), ``sending`` (claimed: the mail may have gone out),
    ``sent``, ``review`` (parked for a person), ``failed`` (the relay refused it for good).
    ``message_id``: the ``Message-ID`` of the mail, chosen before it is sent."""

    id = models.CharField(primary_key=True, max_length=64)
    recipient = models.EmailField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(max_length=16, default="queued")
    message_id = models.CharField(max_length=255, blank=True, default="")
