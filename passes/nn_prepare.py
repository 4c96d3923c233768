"""
nn-prepare{format=Q8.8}: the default nn-level pipeline, from an imported model to the
fixed-point graph Snowflake runs: fold-hard-swish, drop-identity, fold-batch-norm,
fuse-residual-add, fuse-relu, fc-to-conv, avgpool-to-conv, depthwise-to-grouped, split-kernels,
unfold-rows, space-to-depth, partition-host, quantize.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from snowir.pass_steps import run_steps
from snowir.passes.avgpool_to_conv import AvgPoolToConvPass
from snowir.passes.depthwise_to_grouped import DepthwiseToGroupedPass
from snowir.passes.drop_identity import DropIdentityPass
from snowir.passes.fc_to_conv import FcToConvPass
from snowir.passes.fold_batch_norm import FoldBatchNormPass
from snowir.passes.fold_hard_swish import FoldHardSwishPass
from snowir.passes.fuse_relu import FuseReluPass
from snowir.passes.fuse_residual_add import FuseResidualAddPass
from snowir.passes.partition_host import PartitionHostPass
from snowir.passes.quantize import QuantizePass
from snowir.passes.space_to_depth import SpaceToDepthPass
from snowir.passes.split_kernels import SplitKernelsPass
from snowir.passes.unfold_rows import UnfoldRowsPass


@dataclass(frozen=True)
class NNPreparePass(ModulePass):
    name = "nn-prepare"
    format: str = "Q8.8"
    quantize: bool = True
    calibration: str = ""
    """format=auto: a .npy of calibration inputs (quantize)."""
    split_by_cost: bool = True
    """split-kernels{by-cost}: also split convs whose channel parts the planner estimates faster."""
    hw: str = ""
    """A hardware description JSON for the passes that plan (split-kernels, unfold-rows, space-to-depth,
    depthwise-to-grouped, partition-host); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        passes: list[ModulePass] = [FoldHardSwishPass(), DropIdentityPass(), FoldBatchNormPass(),
                                    FuseResidualAddPass(), FuseReluPass(), FcToConvPass(), AvgPoolToConvPass(),
                                    DepthwiseToGroupedPass(self.hw), SplitKernelsPass(by_cost=self.split_by_cost, hw=self.hw),
                                    UnfoldRowsPass(self.hw), SpaceToDepthPass(self.hw), PartitionHostPass(self.hw)]
        if self.quantize:
            passes.append(QuantizePass(self.format, self.calibration))
        run_steps(ctx, op, passes)
