from enum import StrEnum

class BulkActionType4Type(StrEnum):
    POLICY = "policy"

    def __str__(self) -> str:
        return str(self.value)
