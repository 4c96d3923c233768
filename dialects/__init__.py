"""The snowir dialects: nn (tensors), tile (the workload broken down), snowflake_asm (instructions)."""

from collections.abc import Callable

from xdsl.ir import Dialect

from snowir.dialects.nn import NN
from snowir.dialects.snowflake_asm import SnowflakeAsm
from snowir.dialects.tile import Tile


def all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Name -> factory, as xDSL's registries take them."""
    return {"nn": lambda: NN, "tile": lambda: Tile, "snowflake_asm": lambda: SnowflakeAsm}
