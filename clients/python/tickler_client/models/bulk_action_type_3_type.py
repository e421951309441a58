from enum import StrEnum

class BulkActionType3Type(StrEnum):
    REDRIVE = "redrive"

    def __str__(self) -> str:
        return str(self.value)
