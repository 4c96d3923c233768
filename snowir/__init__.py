"""snowir: an xDSL compiler from ONNX CNNs to the Snowflake accelerator."""

from snowir.version import __version__

__all__ = ["__version__"]


def __getattr__(name: str):
    """`snowir.compile`, `snowir.Compiled`, `snowir.Report`, ... (snowir/driver/model_api.py), loaded on
    first use so `import snowir` stays cheap."""
    if name in ("compile", "run", "Compiled", "Result", "Report", "LayerReport", "TotalReport", "CheckReport"):
        from snowir.driver import model_api  # loaded on first use: `import snowir` stays cheap

        return getattr(model_api, name)
    raise AttributeError(f"module 'snowir' has no attribute '{name}'")
