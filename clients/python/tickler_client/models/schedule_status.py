from enum import StrEnum

class ScheduleStatus(StrEnum):
    ACTIVE = "active"
    ENDED = "ended"
    PAUSED = "paused"

    def __str__(self) -> str:
        return str(self.value)
