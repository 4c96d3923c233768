"""
partition-host: mark every nn op `place = "snowflake"` or `place = "host"`.

Snowflake runs MAC/MAX work (conv, dense, pools, residual add, ReLU) and data movement;
everything else (softmax, LRN, transpose, clip, hard-sigmoid/swish, element-wise multiply,
an unfolded batch_norm) runs on the host CPU in float, reading and writing DRAM between
device layers. The runner and the reports follow this attribute.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from snowir.dialects import nn

DEVICE = (nn.Conv2dOp, nn.DenseOp, nn.MaxPoolOp, nn.AvgPoolOp, nn.GlobalAvgPoolOp, nn.AddOp, nn.ReluOp,
          nn.ConcatOp, nn.FlattenOp, nn.ReshapeOp, nn.IdentityOp)


def placement(op) -> str | None:
    attr = op.attributes.get("place")
    return attr.data if isinstance(attr, StringAttr) else None


@dataclass(frozen=True)
class PartitionHostPass(ModulePass):
    name = "partition-host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if inner.name.startswith("nn.") and not isinstance(inner, nn.ConstantOp):
                inner.attributes["place"] = StringAttr("snowflake" if isinstance(inner, DEVICE) else "host")
