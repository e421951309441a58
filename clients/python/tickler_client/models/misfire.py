from enum import StrEnum

class Misfire(StrEnum):
    FIRE_ALL = "fire_all"
    FIRE_ONCE = "fire_once"
    SKIP = "skip"

    def __str__(self) -> str:
        return str(self.value)
