from enum import StrEnum

class BulkActionType5Type(StrEnum):
    RETARGET = "retarget"

    def __str__(self) -> str:
        return str(self.value)
