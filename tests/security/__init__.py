"""The security model (docs/security.md), claim by claim."""
