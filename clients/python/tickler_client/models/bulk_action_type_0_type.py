from enum import StrEnum

class BulkActionType0Type(StrEnum):
    CANCEL = "cancel"

    def __str__(self) -> str:
        return str(self.value)
