from enum import StrEnum

class BulkActionType1Type(StrEnum):
    SHIFT = "shift"

    def __str__(self) -> str:
        return str(self.value)
