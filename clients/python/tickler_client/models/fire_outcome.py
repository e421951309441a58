from enum import StrEnum

class FireOutcome(StrEnum):
    CANCELLED = "cancelled"
    CREATED = "created"
    DEAD = "dead"
    EXPIRED = "expired"
    MISSING = "missing"
    PAUSED = "paused"
    PRODUCED = "produced"
    SKIPPED = "skipped"
    UPCOMING = "upcoming"

    def __str__(self) -> str:
        return str(self.value)
