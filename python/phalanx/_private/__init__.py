"""Internals of the phalanx package; not a public API."""
