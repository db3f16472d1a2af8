"""How many per-item failures (unreadable LLM answers, rejected records) an asset may absorb.

One bad answer should not cost a corpus's other calls, so assets skip it; but a table built from
mostly failures is not a result, and written it would replace a good one. So an asset fails, and
its run commits nothing, when every item failed or more than ``GRAPHLAKE_MAX_FAILURE_SHARE`` of
them did (default 0.25).
"""

from __future__ import annotations

from graphlake.common.settings import MAX_FAILURE_SHARE

SHOWN = 3  # failures quoted in the message


class TooManyFailures(RuntimeError):
    """An asset's items failed beyond its budget; the message counts them and quotes the first."""


def max_share() -> float:
    return MAX_FAILURE_SHARE.number(error=TooManyFailures)


class FailureBudget:
    def __init__(self, what: str, total: int) -> None:
        self.what = what  # "LLM answers of entities_llm (corpus 'x')"
        self.total = total
        self.failures: list[tuple[str, str]] = []
        self.share = max_share()

    def failed(self, item: str, error: Exception | str) -> None:
        self.failures.append((item, str(error)))

    def check(self) -> dict[str, float | int]:
        """Raise when the failures are beyond the budget; else what to record in the asset's metadata."""
        failed = len(self.failures)
        share = failed / self.total if self.total else 0.0
        if failed and (failed == self.total or share > self.share):
            quoted = "; ".join(f"{item}: {error[:160]}" for item, error in self.failures[:SHOWN])
            limit = "all of them" if failed == self.total else f"more than {MAX_FAILURE_SHARE.name}={self.share:g}"
            raise TooManyFailures(f"{failed} of {self.total} {self.what} failed ({limit}); nothing was written. First: {quoted}")
        return {"failed_items": failed, "failed_share": round(share, 4)}
