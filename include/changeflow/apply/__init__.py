"""Apply processes: dequeue LCRs and apply them to targets in source commit order."""
