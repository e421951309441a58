from enum import StrEnum

class BulkActionType6Type(StrEnum):
    RELEASE = "release"

    def __str__(self) -> str:
        return str(self.value)
