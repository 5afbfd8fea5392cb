"""What the gateway knows about a Bedrock model id, derived once per request.

Bedrock takes base model ids (``anthropic.claude-…``), cross-Region inference profiles
(``us.`` / ``eu.`` / ``global.`` …) and ARNs. Parameters that Converse does not unify
(reasoning, cache points, sampling quirks) depend on the model family, so the family is read
from the id after stripping those wrappers; opaque ARNs get the ``other`` family and only
portable parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Cross-Region inference profile prefixes (geography codes) that precede the provider.
_PROFILE_PREFIXES = frozenset({"us", "eu", "apac", "global", "us-gov", "jp", "au", "ca", "apne"})
_GATEWAY_PREFIX = "bedrock/"

# Claude models without prompt caching on Bedrock (older generations).
_CLAUDE_NO_CACHE = ("claude-3-haiku", "claude-3-sonnet", "claude-3-opus", "claude-3-5-sonnet",
                    "claude-v2", "claude-instant")
# Claude models with extended thinking (3.7 and every 4.x generation).
_CLAUDE_THINKING = re.compile(r"claude-(3-7|(opus|sonnet|haiku)-4|4)")
# Claude generations with structured outputs (strict tool schemas) on Bedrock.
_CLAUDE_STRUCTURED = re.compile(r"claude-(opus|sonnet|haiku)-4-[5-9]")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    model_id: str  # what goes into modelId
    family: str  # claude | nova2 | nova | gpt-oss | deepseek | other
    base: str  # provider.model part, lower-case, without profile prefix

    @property
    def is_claude(self) -> bool:
        return self.family == "claude"

    @property
    def claude_thinking(self) -> bool:
        return self.is_claude and bool(_CLAUDE_THINKING.search(self.base))

    @property
    def supports_structured_output(self) -> bool:
        return self.is_claude and bool(_CLAUDE_STRUCTURED.search(self.base))

    @property
    def supports_cache_point(self) -> bool:
        """Models documented for Converse prompt caching (Claude 3.5 Haiku+, Nova)."""
        if self.is_claude:
            return not any(name in self.base for name in _CLAUDE_NO_CACHE)
        return self.family in ("nova", "nova2")

    @property
    def caches_tools(self) -> bool:
        """Only Claude accepts a cachePoint inside ``toolConfig.tools``."""
        return self.is_claude and self.supports_cache_point


def model_info(model: str) -> ModelInfo:
    model_id = model.removeprefix(_GATEWAY_PREFIX)
    base = model_id.rsplit("/", 1)[-1].lower() if model_id.startswith("arn:") else model_id.lower()
    head, _, rest = base.partition(".")
    if head in _PROFILE_PREFIXES and rest:
        base = rest
    provider = base.partition(".")[0]
    if provider == "anthropic":
        family = "claude"
    elif provider == "amazon" and base.startswith("amazon.nova-2"):
        family = "nova2"
    elif provider == "amazon" and base.startswith("amazon.nova"):
        family = "nova"
    elif provider == "openai" and "gpt-oss" in base:
        family = "gpt-oss"
    elif provider == "deepseek":
        family = "deepseek"
    else:
        family = "other"
    return ModelInfo(model_id=model_id, family=family, base=base)


#: Context windows of Bedrock model families, by the start of the base model id (the longest
#: match wins), from each provider's model card: Bedrock's API does not report them.
CONTEXT_WINDOWS: dict[str, int] = {
    "anthropic.claude": 200_000,
    "amazon.nova-micro": 128_000,
    "amazon.nova-lite": 300_000,
    "amazon.nova-pro": 300_000,
    "amazon.nova-premier": 1_000_000,
    "meta.llama3-1": 128_000,
    "meta.llama3-2": 128_000,
    "meta.llama3-3": 128_000,
    "meta.llama4": 128_000,
    "mistral.mistral-large-2407": 128_000,
    "openai.gpt-oss": 128_000,
    "deepseek.r1": 128_000,
    "deepseek.v3": 128_000,
}


#: Model families that read images through Converse, by the start of the base model id, from
#: Bedrock's model cards; what starts with an entry of :data:`TEXT_ONLY` does not.
VISION = ("anthropic.claude-3", "anthropic.claude-opus-4", "anthropic.claude-sonnet-4",
          "anthropic.claude-haiku-4", "amazon.nova-lite", "amazon.nova-pro",
          "amazon.nova-premier", "amazon.nova-2-lite", "meta.llama3-2-11b", "meta.llama3-2-90b",
          "meta.llama4", "mistral.pixtral")
TEXT_ONLY = ("anthropic.claude-3-5-haiku",)


def takes_images(model: str) -> bool | None:
    """True for a documented vision family (profiles and ARNs resolved); None: not known to."""
    base = model_info(model).base
    if base.startswith(VISION) and not base.startswith(TEXT_ONLY):
        return True
    return None


def context_window(model: str) -> int | None:
    """The documented window of ``model``'s family (profiles and ARNs resolved); None if
    the family is not in :data:`CONTEXT_WINDOWS`."""
    base = model_info(model).base
    found = [prefix for prefix in CONTEXT_WINDOWS if base.startswith(prefix)]
    return CONTEXT_WINDOWS[max(found, key=len)] if found else None
