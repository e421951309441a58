from enum import StrEnum

class Outcome(StrEnum):
    FAILED = "failed"
    OK = "ok"
    RETRY = "retry"

    def __str__(self) -> str:
        return str(self.value)
