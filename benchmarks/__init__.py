"""The phasebench benchmark suite (test modules) and its measurement library (`harness`)."""
