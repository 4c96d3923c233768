"""snowir: an xDSL compiler from ONNX CNNs to the Snowflake accelerator."""

__version__ = "0.1.0"
