"""The jobs app: one ``Job`` per mail to send."""
