"""Bookkeeping never fails a response (issue 45, store/bookkeeping.py): a usage write that
fails is retried in the background until it lands; what never lands is logged with the
response id; the gateway's close waits for (then gives up) what is pending."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from responses_gateway.store import bookkeeping
from responses_gateway.store.base import StoreUnavailable
from responses_gateway.store.usage import UsageEntry


class FlakyLedger:
    """A ledger whose first ``failures`` writes fail as a throttled store does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.recorded: list[str] = []

    async def record(self, entry: UsageEntry, windows: Any) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailable("DynamoDB transact_write_items failed: ThrottlingException")
        self.recorded.append(entry.response_id)
        return True


def entry(response_id: str = "resp_bk1") -> UsageEntry:
    return UsageEntry(response_id=response_id, tenant="t_a", model="m", status="completed",
                      created_at=1_700_000_000, finished_at=1_700_000_000.0,
                      counts={"requests": 1, "input_tokens": 3})


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bookkeeping, "RETRY_DELAYS", (0.01, 0.01, 0.01))


def test_a_failed_write_is_retried_off_the_path_until_it_lands() -> None:
    async def run() -> FlakyLedger:
        ledger = FlakyLedger(failures=3)
        await bookkeeping.record(ledger, entry(), None)  # returns at once: no raise
        assert ledger.recorded == [] and bookkeeping.pending() == 1
        await bookkeeping.drain(5)
        return ledger

    ledger = asyncio.run(run())
    assert ledger.recorded == ["resp_bk1"] and ledger.calls == 4
    assert bookkeeping.pending() == 0


def test_what_never_lands_is_logged_with_the_response_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        await bookkeeping.record(FlakyLedger(failures=99), entry("resp_lost"), None)
        await bookkeeping.drain(5)

    with caplog.at_level(logging.INFO, logger="responses_gateway"):
        asyncio.run(run())
    lost = [r for r in caplog.records if r.getMessage().startswith("could not record")]
    assert len(lost) == 1 and lost[0].levelno == logging.ERROR
    assert "resp_lost" in lost[0].getMessage() and "Throttling" in lost[0].getMessage()
    assert lost[0].usage_lost["usage"]["input_tokens"] == 3  # the entry, to replay it


def test_closing_gives_up_what_is_still_pending_and_logs_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(bookkeeping, "RETRY_DELAYS", (60.0,))

    async def run() -> None:
        await bookkeeping.record(FlakyLedger(failures=1), entry("resp_late"), None)
        await bookkeeping.drain(0.05)

    with caplog.at_level(logging.INFO, logger="responses_gateway"):
        asyncio.run(run())
    assert bookkeeping.pending() == 0
    assert any("resp_late" in r.getMessage() for r in caplog.records
               if r.levelno == logging.ERROR)
