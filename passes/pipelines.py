"""
The two pipelines, as pass lists in one place.

nn-prepare{format=Q8.8}: from an imported model to the fixed-point graph Snowflake runs:
resize-to-conv-transpose, conv-transpose-to-conv, fold-hard-swish, drop-identity, fold-focus, cascade-max-pool, fold-batch-norm, fuse-residual-add, fuse-relu,
fold-channel-shuffle, split-recurrence, sequence-gemm, fc-to-conv,
avgpool-to-conv, depthwise-to-grouped, split-kernels, unfold-rows, space-to-depth, pad-rows,
copy-concat-slices, add-to-bypass, the nn pass of each write-back unit the machine has
(snowir/writeback.py), drop-identity{split-heads} (again), se-gate, choose-layouts, partition-host,
quantize.

snowflake-lower{format=Q8.8|auto calibration=x.npy mode=auto loop-order=auto hw=path.json}: the
default lowering from an nn module to one `snowflake_asm.image` per device segment (a run of
device layers with no host layer between them: one instruction stream over the model's DRAM
plan, as C17 deploys a model), as the pass list `PIPELINE`:

    nn-prepare, nn-to-tile, tile-loop-order, allocate-dram, tile-to-asm,
    balance-loads, schedule-asm, fill-delay-slots, link-segments, icache-banking

`whole-model=false` leaves out allocate-dram and link-segments: one image per device layer, each
with a DRAM of its own (the host copies each layer's output into the next one's input).

Spelled out with `-p` (options given to the pass they belong to), the same list gives the
same module. Every pass skips what is already done (a quantised module is not re-quantised,
layers with a tile or image keep it, set loop orders stay, balanced or banked programs stay
as they are), so running it on a partly lowered module finishes the lowering.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir import writeback
from snowir.hw import SnowflakeConfig
from snowir.dialects import nn
from snowir.asm_analysis import finished_programs_only
from snowir.pass_steps import run_steps
from snowir.passes.asm.balance_loads import BalanceLoadsPass
from snowir.passes.asm.fill_delay_slots import FillDelaySlotsPass
from snowir.passes.asm.icache_banking import IcacheBankingPass
from snowir.passes.asm.link_segments import LinkSegmentsPass
from snowir.passes.asm.schedule_asm import ScheduleAsmPass
from snowir.passes.convert.nn_to_tile import NNToTilePass
from snowir.passes.convert.tile_to_asm import TileToAsmPass
from snowir.passes.nn.add_to_bypass import AddToBypassPass
from snowir.passes.nn.avgpool_to_conv import AvgPoolToConvPass
from snowir.passes.nn.choose_layouts import ChooseLayoutsPass
from snowir.passes.nn.cascade_max_pool import CascadeMaxPoolPass
from snowir.passes.nn.conv_transpose_to_conv import ConvTransposeToConvPass
from snowir.passes.nn.copy_concat_slices import CopyConcatSlicesPass
from snowir.passes.nn.resize_to_conv_transpose import ResizeToConvTransposePass
from snowir.passes.nn.depthwise_to_grouped import DepthwiseToGroupedPass
from snowir.passes.nn.drop_identity import DropIdentityPass
from snowir.passes.nn.fc_to_conv import FcToConvPass
from snowir.passes.nn.fold_batch_norm import FoldBatchNormPass
from snowir.passes.nn.fold_channel_shuffle import FoldChannelShufflePass
from snowir.passes.nn.fold_focus import FoldFocusPass
from snowir.passes.nn.fold_hard_swish import FoldHardSwishPass
from snowir.passes.nn.fuse_relu import FuseReluPass
from snowir.passes.nn.fuse_residual_add import FuseResidualAddPass
from snowir.passes.nn.partition_host import PartitionHostPass
from snowir.passes.nn.quantize import QuantizePass
from snowir.passes.nn.se_gate import SEGatePass
from snowir.passes.nn.sequence_gemm import SequenceGemmPass
from snowir.passes.nn.split_recurrence import SplitRecurrencePass
from snowir.passes.nn.space_to_depth import SpaceToDepthPass
from snowir.passes.nn.split_kernels import SplitKernelsPass
from snowir.passes.nn.pad_rows import PadRowsPass
from snowir.passes.nn.unfold_rows import UnfoldRowsPass
from snowir.passes.tile.allocate_dram import AllocateDramPass
from snowir.passes.tile.tile_loop_order import TileLoopOrderPass

PIPELINE = ("nn-prepare", "nn-to-tile", "tile-loop-order", "allocate-dram", "tile-to-asm", "balance-loads",
            "schedule-asm", "fill-delay-slots", "link-segments", "icache-banking")


@dataclass(frozen=True)
class NNPreparePass(ModulePass):
    """The nn-level pipeline: graph passes, partition-host, then quantisation (default Q8.8)."""

    name = "nn-prepare"
    format: str = "Q8.8"
    quantize: bool = True
    calibration: str = ""
    """format=auto: a .npy of calibration inputs (quantize)."""
    split_by_cost: bool = True
    """split-kernels{by-cost}: also split convs whose channel parts the planner estimates faster."""
    split_kernel_parts: bool | None = None
    """split-kernels{kernel-parts}: also weigh kernel (output-channel) parts (absent: with split-by-cost;
    true without it is refused)."""
    sequence_gemm: bool = True
    """false: sequence-gemm{layout=off} (a dense over timesteps runs as T one-pixel images)."""
    split_recurrence: bool = True
    """false: leave out split-recurrence (an LSTM, GRU or RNN stays one host node, its input projection too)."""
    add_to_bypass: bool = True
    """false: add-to-bypass{enable=false} (an add of host results stays on the host)."""
    se_gate: bool = True
    """false: se-gate{enable=false} (an SE block's gate multiply stays on the host)."""
    layouts: bool = True
    """false: choose-layouts{tiles=false} (every bypass chain's tensors whole pixels)."""
    pad_rows: bool = True
    """false: leave out pad-rows (an INDP conv on the model input keeps its row padding as clipped
    kernel rows, run one CU at a time)."""
    hw: str = ""
    """A hardware description JSON for the passes that plan (conv-transpose-to-conv, fold-channel-shuffle, sequence-gemm, avgpool-to-conv, split-kernels, unfold-rows,
    space-to-depth, pad-rows, depthwise-to-grouped, choose-layouts, partition-host); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        passes: list[ModulePass] = [ResizeToConvTransposePass(), ConvTransposeToConvPass(self.hw), FoldHardSwishPass(), DropIdentityPass(), FoldFocusPass(), CascadeMaxPoolPass(), FoldBatchNormPass(),
                                    FuseResidualAddPass(hw=self.hw), FuseReluPass(), FoldChannelShufflePass(self.hw),
                                    *([SplitRecurrencePass()] if self.split_recurrence else []),
                                    SequenceGemmPass("auto" if self.sequence_gemm else "off", self.hw), FcToConvPass(), AvgPoolToConvPass(self.hw),
                                    DepthwiseToGroupedPass(self.hw), SplitKernelsPass(by_cost=self.split_by_cost, kernel_parts=self.split_kernel_parts, hw=self.hw),
                                    UnfoldRowsPass(self.hw), SpaceToDepthPass(self.hw), *([PadRowsPass(self.hw)] if self.pad_rows else []),
                                    CopyConcatSlicesPass(self.hw), AddToBypassPass(self.add_to_bypass, self.hw),
                                    *self._unit_passes(),
                                    DropIdentityPass(split_heads=True),  # again: a split the units' activations reassembled
                                    SEGatePass(self.se_gate, self.hw),  # after: a gate a device conv writes stays a host Mul
                                    ChooseLayoutsPass(self.layouts, self.hw),  # the bypass chains are all formed now
                                    PartitionHostPass(self.hw)]
        if self.quantize:
            passes.append(QuantizePass(self.format, self.calibration))
        run_steps(ctx, op, passes)

    def _unit_passes(self) -> list[ModulePass]:
        """The nn pass of each write-back unit the machine has (snowir/writeback.py), in the
        units' order; none on the stock machine, whose pipeline is the ZC706 build's."""
        hw = SnowflakeConfig.load(self.hw or None)
        return [u.nn_pass.load()(hw=self.hw) for u in writeback.units()
                if u.nn_pass is not None and u.machine_has(hw)]


def quantised(op: ModuleOp) -> bool:
    return "nn.format" in op.attributes or any(isinstance(getattr(v.type, "element_type", None), nn.FixedType)
               for f in op.walk() if f.name == "func.func" for v in f.body.block.args)


@dataclass(frozen=True)
class SnowflakeLowerPass(ModulePass):
    """The default lowering, nn to one snowflake_asm.image per device segment (PIPELINE)."""

    name = "snowflake-lower"
    format: str = "Q8.8"
    calibration: str = ""
    """format=auto: a .npy of calibration inputs (quantize)."""
    loop_order: str = "auto"
    mode: str = "auto"
    hw: str = ""
    whole_model: bool = True
    """One image per device segment over a model DRAM plan; false: one image per device layer."""
    guard: bool = False
    """Run balance-loads, schedule-asm and fill-delay-slots with their machine-model guard (each
    program measured before and after, the original kept where the rewrite loses: about 6x the
    compile time). Off in the pipeline: the passes' own rules lose on no layer bench/ablation.py
    has measured in the linked programs (bench/results/ablation.json; the ResNet-50 loss it found was
    icache-banking's bank load queued before weight loads, fixed there), and the guard measures
    layers alone, before link-segments, so it could not have seen that one. Alone, each pass guards
    by default."""
    measure_slots: bool = False
    """fill-delay-slots{measure}: a program with a loop its traces bound is also run with such loops
    filled, and the variant kept that makes no layer slower and the model faster (issue 38's
    load-wait layers: Inception v1's n110 −196, DenseNet-121's n465 −305 cycles). About 7x the
    compile time (every such program run two or three times on the machine model), so off."""

    def passes(self, quantised_already: bool, lowered_already: bool = False) -> list[ModulePass]:
        steps: list[ModulePass] = [] if quantised_already else \
            [NNPreparePass(self.format, calibration=self.calibration, hw=self.hw)]
        plan: list[ModulePass] = [AllocateDramPass(self.hw)] if self.whole_model else []
        link: list[ModulePass] = [LinkSegmentsPass()] if self.whole_model else []
        # a module snowflake-lower already lowered holds only linked / banked programs, which the
        # rewriting asm passes refuse: lowering it again leaves it as it is
        rewrite: list[ModulePass] = [] if lowered_already else \
            [BalanceLoadsPass(hw=self.hw, guard=self.guard), ScheduleAsmPass(self.hw, guard=self.guard),
             FillDelaySlotsPass(self.hw, guard=self.guard, measure=self.measure_slots)]
        return steps + [NNToTilePass(self.mode, self.hw), TileLoopOrderPass(self.loop_order, self.hw), *plan,
                        TileToAsmPass(self.hw), *rewrite, *link, IcacheBankingPass(self.hw)]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lowered = finished_programs_only(op)
        asked = [f"{name}=true" for name, on in (("guard", self.guard), ("measure-slots", self.measure_slots)) if on]
        if lowered and asked:
            # the options only reach the rewriting asm passes, which a lowered module skips:
            # refused rather than a run that ignores them
            raise PassFailedException(f"snowflake-lower: {' '.join(asked)} applies to balance-loads, schedule-asm and "
                                      "fill-delay-slots, which a lowered module (linked or banked programs) skips; "
                                      "lower the nn or tile module with it")
        run_steps(ctx, op, self.passes(quantised(op), lowered))
