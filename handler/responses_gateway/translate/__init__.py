"""Translation between the Responses API and Chat Completions, in both directions."""
