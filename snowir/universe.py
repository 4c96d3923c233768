"""
snowir as an xDSL plugin (`[project.entry-points.'xdsl.universe']` in pyproject.toml): plain
`xdsl-opt` and any xDSL tool built on the multiverse then load snowir's dialects (nn, tile,
snowflake_asm), passes and the snowflake-bin target. snow-opt adds the ONNX / .sfb frontends.
"""

from xdsl.universe import Universe

from snowir.dialects import all_dialects
from snowir.passes import all_passes

SNOWIR = Universe(all_dialects=all_dialects(), all_passes=all_passes())
