"""The File object as OpenAI returns it, and the purposes a client may upload for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: What ``POST /v1/files`` accepts as ``purpose`` (OpenAI's list, in its order).
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One uploaded file's record; its bytes live in the blob store under ``blob_key``."""

    id: str
    tenant: str
    filename: str
    bytes: int
    purpose: str
    created_at: int
    expires_at: int | None = None

    @property
    def blob_key(self) -> str:
        return blob_key(self.tenant, self.id)

    def to_object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }

    def to_row(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "filename": self.filename,
                "bytes": self.bytes, "purpose": self.purpose, "created_at": self.created_at,
                "expires_at": self.expires_at}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FileRecord:
        return cls(id=row["id"], tenant=row["tenant"], filename=row["filename"],
                   bytes=int(row["bytes"]), purpose=row["purpose"],
                   created_at=int(row["created_at"]),
                   expires_at=None if row.get("expires_at") is None else int(row["expires_at"]))

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


def blob_key(tenant: str, file_id: str) -> str:
    """Where a file's bytes live: under its tenant, so one tenant's prefix holds only its own."""
    return f"{tenant}/{file_id}"


#: An Upload's statuses (files/uploads.py): ``completing`` is shown as ``pending``; an open
#: Upload past its hour is shown ``expired`` before it is stored so (files/store.py expire).
PENDING, COMPLETING, COMPLETED, CANCELLED = "pending", "completing", "completed", "cancelled"
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class UploadRecord:
    id: str
    tenant: str
    filename: str
    bytes: int
    purpose: str
    mime_type: str
    created_at: int
    expires_at: int
    status: str = PENDING  # pending, completing (shown as pending), completed, cancelled
    received: int = 0  # bytes of the parts added so far
    file_id: str | None = None
    file_expires_after: int | None = None  # the File's expires_after.seconds
    claimed_until: float = 0.0  # while completing

    def expirable(self, now: float) -> bool:
        """Open past its hour, and no complete is running (one whose claim ran out is not)."""
        return self.expires_at <= now and (
            self.status == PENDING or (self.status == COMPLETING and self.claimed_until < now))

    def shown_status(self, now: float) -> str:
        if self.status in (PENDING, COMPLETING):
            return "expired" if self.expires_at <= now else PENDING
        return self.status

    def to_object(self, now: float, file: FileRecord | None = None) -> dict[str, Any]:
        """OpenAI's Upload object, its status as of ``now`` (the Uploads' clock)."""
        return {
            "id": self.id, "object": "upload", "bytes": self.bytes,
            "created_at": self.created_at, "expires_at": self.expires_at,
            "filename": self.filename, "purpose": self.purpose,
            "status": self.shown_status(now),
            "file": file.to_object() if file is not None else None,
        }

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> UploadRecord:
        return cls(
            id=row["id"], tenant=row["tenant"], filename=row["filename"],
            bytes=int(row["bytes"]), purpose=row["purpose"], mime_type=row["mime_type"],
            created_at=int(row["created_at"]), expires_at=int(row["expires_at"]),
            status=row["status"], received=int(row.get("received") or 0),
            file_id=row.get("file_id"),
            file_expires_after=None if row.get("file_expires_after") is None
            else int(row["file_expires_after"]),
            claimed_until=float(row.get("claimed_until") or 0))
