"""Reusable test helpers (servers started on 127.0.0.1, environment setup)."""
