from enum import StrEnum

class BulkActionType2Type(StrEnum):
    MOVE = "move"

    def __str__(self) -> str:
        return str(self.value)
