"""The status of a run or a survey (base layer): what the store keeps, what
the documents carry, and what the analysis reads."""
RUNNING, COMPLETE, INTERRUPTED, FAILED = "running", "complete", "interrupted", "failed"
STATUSES = (RUNNING, COMPLETE, INTERRUPTED, FAILED)
FINAL_STATUSES = (COMPLETE, INTERRUPTED, FAILED)
