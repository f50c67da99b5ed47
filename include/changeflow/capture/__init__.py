"""Captures: turning changes at a source into LCRs enqueued into a queue."""
