"""snowir passes, one per file; `all_passes()` is the registry snow-opt and the API use."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return {}
