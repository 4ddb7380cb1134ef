"""Test support shared by the webhook, demo and reliability suites (never imported by product code)."""
