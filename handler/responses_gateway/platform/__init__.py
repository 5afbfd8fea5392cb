"""The platform the gateway runs on, chosen once from ``GATEWAY_STORE``; the one module that
reads that setting.

- ``sqlite:PATH``: **local** (platform/local.py): responses, conversations, file records and
  vectors (sqlite-vec) in the SQLite file PATH, file bytes in ``PATH.files/``, images in
  ``PATH.blobs/``; background work runs in the process.
- ``dynamodb:TABLE``: **AWS** (platform/aws.py): DynamoDB TABLE, file bytes in S3
  (``GATEWAY_FILES_BUCKET``), vectors in S3 Vectors (``GATEWAY_VECTOR_BUCKET``), images in S3,
  WebSocket connections of API Gateway in TABLE.

A :class:`~responses_gateway.platform.base.Platform` builds each engine when asked, importing
its module then: a process loads boto3 only for AWS, and an engine it never uses not at all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from responses_gateway.records import Frozen

if TYPE_CHECKING:
    from responses_gateway.platform.base import Platform
    from responses_gateway.settings import Settings

LOCAL = "sqlite"  # GATEWAY_STORE=sqlite:PATH
AWS = "dynamodb"  # GATEWAY_STORE=dynamodb:TABLE


class Declared(Frozen):
    """One platform as the gateway knows it before its module is imported (compared by
    identity, as tools/declaration.py's registrations; a frozen record, records.py: this
    module is on every cold start)."""

    __slots__ = ("form", "needs_image_bucket", "needs_target", "target")

    #: what ``GATEWAY_STORE`` looks like for it (``dynamodb:TABLE``)
    form: str
    #: ``"module:Class"`` of its :class:`~responses_gateway.platform.base.Platform`, built with
    #: ``(settings, target)``
    target: str
    #: its ``GATEWAY_STORE`` must name something after the colon (a table)
    needs_target: bool
    #: large values (generated images) cannot be kept beside its records, so an image
    #: backend needs ``GATEWAY_IMAGE_BUCKET`` (a DynamoDB item holds 400 KB)
    needs_image_bucket: bool

    def __init__(self, form: str, target: str, needs_target: bool = False,
                 needs_image_bucket: bool = False) -> None:
        init = object.__setattr__
        init(self, "form", form)
        init(self, "target", target)
        init(self, "needs_target", needs_target)
        init(self, "needs_image_bucket", needs_image_bucket)


#: The platforms by ``GATEWAY_STORE``'s kind: a new storage engine is one subclass of
#: ``Platform`` and one line here (config.py checks the setting against this table).
PLATFORMS: dict[str, Declared] = {
    LOCAL: Declared("sqlite:PATH", "responses_gateway.platform.local:LocalPlatform"),
    AWS: Declared("dynamodb:TABLE", "responses_gateway.platform.aws:AWSPlatform",
                  needs_target=True, needs_image_bucket=True),
}


def store_parts(text: str) -> tuple[str, str]:
    """A ``GATEWAY_STORE`` value as (kind, target): ``("sqlite", PATH)``, ``("dynamodb",
    TABLE)``; the kind is whatever precedes the colon (:func:`declared` refuses an unknown
    one)."""
    kind, _, target = text.partition(":")
    return kind, target


def declared(text: str) -> Declared:
    """The platform a ``GATEWAY_STORE`` value names, checked (config.py, at start): a
    ``ValueError`` naming the forms when it names none."""
    kind, target = store_parts(text.strip())
    platform = PLATFORMS.get(kind)
    if platform is None or (platform.needs_target and not target):
        raise ValueError(f"GATEWAY_STORE must be {_forms()}, not {text!r}")
    return platform


def _forms() -> str:
    return " or ".join(p.form for p in PLATFORMS.values())


def platform_for(settings: Settings) -> Platform:
    """The platform ``settings`` choose (cheap: no engine is built or imported yet)."""
    kind, target = store_parts(settings.store)
    platform = PLATFORMS.get(kind)
    if platform is None:
        raise ValueError(f"GATEWAY_STORE must be {_forms()}, not {settings.store!r}")
    if platform.needs_target and not target:
        noun = platform.form.partition(":")[2].lower()
        raise ValueError(f"GATEWAY_STORE={platform.form} needs a {noun} name")
    module, _, name = platform.target.partition(":")
    cls: type[Platform] = getattr(importlib.import_module(module), name)
    return cls(settings, target)  # type: ignore[call-arg]


def vector_stores_available(settings: Settings) -> bool:
    """Whether this platform has vector stores (file_search runs in the gateway then; else it
    stays a hosted tool, tools/hosted.py)."""
    return platform_for(settings).has_vector_stores


def dynamodb_table(text: str) -> str | None:
    """The DynamoDB table a ``GATEWAY_STORE`` value names, None for another platform
    (``responses-gateway store init``)."""
    kind, target = store_parts(text)
    return (target or None) if kind == AWS else None
