"""The snowir dialects: nn (tensors), tile (the workload broken down), snowflake_asm (instructions)."""

from collections.abc import Callable

from xdsl.ir import Dialect


def all_dialects() -> dict[str, Callable[[], Dialect]]:
    def nn() -> Dialect:
        from snowir.dialects.nn import NN

        return NN

    def tile() -> Dialect:
        from snowir.dialects.tile import Tile

        return Tile

    def snowflake_asm() -> Dialect:
        from snowir.dialects.snowflake_asm import SnowflakeAsm

        return SnowflakeAsm

    return {"nn": nn, "tile": tile, "snowflake_asm": snowflake_asm}
