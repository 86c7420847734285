"""One pack from its source to DST: options checked, staging planned, engines run, commit."""
