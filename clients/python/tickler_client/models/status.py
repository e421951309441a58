from enum import StrEnum

class Status(StrEnum):
    CANCELLED = "cancelled"
    DEAD = "dead"
    DISPATCHED = "dispatched"
    DISPATCHING = "dispatching"
    EXPIRED = "expired"
    PENDING = "pending"
    SUCCEEDED = "succeeded"

    def __str__(self) -> str:
        return str(self.value)
