"""Reusable test support: processes and helpers shared by several test suites."""
