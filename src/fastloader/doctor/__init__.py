"""Diagnosis: `fastloader doctor`, profile() of any loader, and the pure verdict function."""
