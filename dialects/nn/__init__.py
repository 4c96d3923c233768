"""
The `nn` dialect: a CNN as tensor values, one op per layer.

Close to ONNX, but holding only what Snowflake needs to know. Tensors are NCHW
(`tensor<1x64x56x56xf32>`); after quantisation their element type is a fixed-point
type `!nn.fixed<8, 8>` (integer bits, fraction bits, 16 bits in all on Snowflake).
Layer hyper-parameters are properties printed in the attribute dictionary so a
researcher can read and edit them:

    %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>,
                               dilations = array<i64: 1, 1>, groups = 1 : i64, relu}
         : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>

Weights never bloat the text: `nn.constant` holds a `dense_resource` blob, a small
`dense` literal, or `#nn.external<"file.npz", "key">` naming an array in a side file.

Laid out as xDSL's riscv dialect is: attributes.py (types and attributes), abstract_ops.py (the
op bases and shape helpers), tensor_ops.py (weights and device layers), host_ops.py (host-only
layers and `nn.host`). Every name is re-exported here, so `from snowir.dialects import nn;
nn.Conv2dOp` reads as it always has.
"""

from __future__ import annotations

# the builtin attributes callers build nn properties with (`nn.IntegerAttr(axis, nn.i64)`), as
# they could when the dialect was one module
from xdsl.dialects.builtin import ArrayAttr, Float32Type, FloatAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Dialect

from snowir.dialects.nn.abstract_ops import (
    ElementwiseBinary,
    ElementwiseUnary,
    NNOperation,
    PoolOperation,
    element_of,
    i64_array,
    int_values,
    shape_of,
    window_out,
)
from snowir.dialects.nn.attributes import (
    MAX_WEIGHT_FRAC,
    ElementType,
    ExternalWeightsAttr,
    FixedType,
    OnnxGraphAttr,
    PackedWeightsAttr,
)
from snowir.dialects.nn.conv_transpose_ops import ConvTranspose2dOp, DepthToSpaceOp, ZeroInsertOp, transpose_out
from snowir.dialects.nn.host_ops import (
    ClipOp,
    HardSigmoidOp,
    HardSwishOp,
    HostOp,
    LrnOp,
    MulOp,
    PadRowsOp,
    SoftmaxOp,
    SpaceToDepthOp,
    TransposeOp,
    UnfoldRowsOp,
)
from snowir.dialects.nn.tensor_ops import (
    AddOp,
    AvgPoolOp,
    BatchNormOp,
    ChannelSliceOp,
    ConcatOp,
    ConstantOp,
    Conv2dOp,
    CropOp,
    DenseOp,
    FlattenOp,
    GlobalAvgPoolOp,
    IdentityOp,
    MaxPoolOp,
    ReluOp,
    ReshapeOp,
)

DEVICE_OPS = (Conv2dOp, MaxPoolOp, AvgPoolOp, GlobalAvgPoolOp, DenseOp, AddOp, ReluOp,
              BatchNormOp, ConcatOp, FlattenOp, ReshapeOp, IdentityOp, ChannelSliceOp, CropOp,
              ConvTranspose2dOp)
HOST_OPS = (SoftmaxOp, LrnOp, TransposeOp, ClipOp, HardSigmoidOp, HardSwishOp, MulOp, SpaceToDepthOp, UnfoldRowsOp, PadRowsOp,
            DepthToSpaceOp, ZeroInsertOp, HostOp)

NN = Dialect(
    "nn",
    [ConstantOp, *DEVICE_OPS, *HOST_OPS],
    [FixedType, ExternalWeightsAttr, PackedWeightsAttr, OnnxGraphAttr],
)

__all__ = [
    "DEVICE_OPS", "HOST_OPS", "MAX_WEIGHT_FRAC", "NN",
    "AddOp", "AvgPoolOp", "BatchNormOp", "ChannelSliceOp", "ClipOp", "ConcatOp", "ConstantOp", "Conv2dOp",
    "ConvTranspose2dOp", "CropOp", "DenseOp", "DepthToSpaceOp",
    "ElementType", "ElementwiseBinary", "ElementwiseUnary", "ExternalWeightsAttr", "FixedType", "FlattenOp",
    "GlobalAvgPoolOp", "HardSigmoidOp", "HardSwishOp", "HostOp", "IdentityOp", "LrnOp", "MaxPoolOp", "MulOp",
    "NNOperation", "OnnxGraphAttr", "PackedWeightsAttr", "PadRowsOp", "PoolOperation", "ReluOp", "ReshapeOp",
    "SoftmaxOp", "SpaceToDepthOp", "TransposeOp", "UnfoldRowsOp", "ZeroInsertOp", "element_of", "i64_array", "int_values", "shape_of",
    "transpose_out", "window_out",
    "ArrayAttr", "Float32Type", "FloatAttr", "IntegerAttr", "StringAttr", "UnitAttr", "i64",
]
