"""Upstream adapters. Each turns a chat request into a stream of chat-completion chunks."""

from responses_gateway.backends.base import Backend, BackendRequest

__all__ = ["Backend", "BackendRequest"]
