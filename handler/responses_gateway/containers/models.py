"""A container and a container file as the gateway keeps them, and as OpenAI shows them.

A container is ``running`` until it is deleted (its record goes) or goes ``expired_after``
without use (``last_active_at`` + ``idle_seconds``): then its engine box is stopped (processes
and files gone), its files' records are removed, and its record stays ``expired`` for a while
(``forget_at``) so ``GET /v1/containers/{id}`` answers as OpenAI does (status ``expired``),
before it goes too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

RUNNING, EXPIRED, DELETED = "running", "expired", "deleted"
MEMORY_LIMITS = ("1g", "4g", "16g", "64g")  # OpenAI's; the default is the first
#: files one container may be created with (``file_ids``), as the code_interpreter tool's
#: auto container takes at most (OpenAI's array bound)
MAX_FILE_IDS = 100


def memory_mb(limit: str) -> int:
    """``"4g"`` -> 4096."""
    return int(limit.rstrip("g")) * 1024


@dataclass(slots=True)
class ContainerRecord:
    id: str  # cntr_…
    tenant: str
    name: str
    created_at: int
    last_active_at: float
    memory_limit: str = MEMORY_LIMITS[0]
    #: ``expires_after.minutes`` as the client gave it (None: GATEWAY_CONTAINER_IDLE_SECONDS)
    expires_minutes: int | None = None
    #: seconds without use after which it expires (from the above, fixed at creation)
    idle_seconds: float = 1200.0
    status: str = RUNNING  # running | expired (a deleted container has no record)
    #: what the engine keeps between processes (an AgentCore session), as it returned it
    state: str | None = None
    #: when an expired record is dropped (set when it expires; DynamoDB's TTL there)
    forget_at: float | None = None

    @property
    def active_until(self) -> float:
        """When it expires unless used again."""
        return self.last_active_at + self.idle_seconds

    def expired(self, now: float) -> bool:
        return self.status == EXPIRED or self.active_until <= now

    def to_api(self) -> dict[str, Any]:
        """OpenAI's container object."""
        minutes = self.expires_minutes if self.expires_minutes is not None \
            else max(1, round(self.idle_seconds / 60))
        return {
            "id": self.id, "object": "container", "created_at": self.created_at,
            "status": self.status, "name": self.name,
            "expires_after": {"anchor": "last_active_at", "minutes": minutes},
            "last_active_at": int(self.last_active_at), "memory_limit": self.memory_limit,
            "network_policy": {"type": "disabled"},
        }

    def to_row(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ContainerRecord:
        return cls(
            id=row["id"], tenant=row["tenant"], name=row["name"],
            created_at=int(row["created_at"]), last_active_at=float(row["last_active_at"]),
            memory_limit=row.get("memory_limit") or MEMORY_LIMITS[0],
            expires_minutes=None if row.get("expires_minutes") is None
            else int(row["expires_minutes"]),
            idle_seconds=float(row["idle_seconds"]), status=row["status"],
            state=row.get("state"),
            forget_at=None if row.get("forget_at") is None else float(row["forget_at"]))


@dataclass(slots=True)
class ContainerFile:
    id: str  # cfile_…
    container_id: str
    tenant: str
    path: str  # /mnt/data/…
    bytes: int
    created_at: int
    source: str = "user"  # user | assistant

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_api(self) -> dict[str, Any]:
        """OpenAI's container.file object."""
        return {"id": self.id, "object": "container.file", "bytes": self.bytes,
                "container_id": self.container_id, "created_at": self.created_at,
                "path": self.path, "source": self.source}

    def to_row(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ContainerFile:
        return cls(id=row["id"], container_id=row["container_id"], tenant=row["tenant"],
                   path=row["path"], bytes=int(row["bytes"]),
                   created_at=int(row["created_at"]), source=row["source"])
