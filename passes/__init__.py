"""snowir passes, one per file, a folder per level: nn/ (graph passes on tensors), convert/ (nn-to-tile,
tile-to-asm), tile/ (decisions on tile IR), asm/ (on snowflake_asm programs); pipelines.py holds
nn-prepare and snowflake-lower as pass lists. `all_passes()` is the registry snow-opt and the API use."""

from collections.abc import Callable

from xdsl.passes import ModulePass

import importlib

from snowir import writeback


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def p(module: str, cls: str) -> Callable[[], type[ModulePass]]:
        def load() -> type[ModulePass]:
            return getattr(importlib.import_module(f"snowir.passes.{module}"), cls)

        return load

    return {
        "resize-to-conv-transpose": p("nn.resize_to_conv_transpose", "ResizeToConvTransposePass"),
        "conv-transpose-to-conv": p("nn.conv_transpose_to_conv", "ConvTransposeToConvPass"),
        "drop-identity": p("nn.drop_identity", "DropIdentityPass"),
        "fold-focus": p("nn.fold_focus", "FoldFocusPass"),
        "copy-concat-slices": p("nn.copy_concat_slices", "CopyConcatSlicesPass"),
        "cascade-max-pool": p("nn.cascade_max_pool", "CascadeMaxPoolPass"),
        "fold-batch-norm": p("nn.fold_batch_norm", "FoldBatchNormPass"),
        "fuse-relu": p("nn.fuse_relu", "FuseReluPass"),
        # each write-back unit's nn pass, declared with its unit (snowir/writeback.py)
        **{u.nn_pass.name: u.nn_pass.load for u in writeback.units() if u.nn_pass is not None},
        "fuse-residual-add": p("nn.fuse_residual_add", "FuseResidualAddPass"),
        "fold-channel-shuffle": p("nn.fold_channel_shuffle", "FoldChannelShufflePass"),
        "split-recurrence": p("nn.split_recurrence", "SplitRecurrencePass"),
        "sequence-gemm": p("nn.sequence_gemm", "SequenceGemmPass"),
        "fc-to-conv": p("nn.fc_to_conv", "FcToConvPass"),
        "avgpool-to-conv": p("nn.avgpool_to_conv", "AvgPoolToConvPass"),
        "depthwise-to-grouped": p("nn.depthwise_to_grouped", "DepthwiseToGroupedPass"),
        "fold-hard-swish": p("nn.fold_hard_swish", "FoldHardSwishPass"),
        "add-to-bypass": p("nn.add_to_bypass", "AddToBypassPass"),
        "se-gate": p("nn.se_gate", "SEGatePass"),
        "partition-host": p("nn.partition_host", "PartitionHostPass"),
        "quantize": p("nn.quantize", "QuantizePass"),
        "nn-prepare": p("pipelines", "NNPreparePass"),
        "split-kernels": p("nn.split_kernels", "SplitKernelsPass"),
        "choose-layouts": p("nn.choose_layouts", "ChooseLayoutsPass"),
        "space-to-depth": p("nn.space_to_depth", "SpaceToDepthPass"),
        "unfold-rows": p("nn.unfold_rows", "UnfoldRowsPass"),
        "pad-rows": p("nn.pad_rows", "PadRowsPass"),
        "nn-to-tile": p("convert.nn_to_tile", "NNToTilePass"),
        "tile-loop-order": p("tile.tile_loop_order", "TileLoopOrderPass"),
        "tile-rows": p("tile.tile_rows", "TileRowsPass"),
        "allocate-dram": p("tile.allocate_dram", "AllocateDramPass"),
        "tile-to-asm": p("convert.tile_to_asm", "TileToAsmPass"),
        "balance-loads": p("asm.balance_loads", "BalanceLoadsPass"),
        "schedule-asm": p("asm.schedule_asm", "ScheduleAsmPass"),
        "fill-delay-slots": p("asm.fill_delay_slots", "FillDelaySlotsPass"),
        "link-segments": p("asm.link_segments", "LinkSegmentsPass"),
        "icache-banking": p("asm.icache_banking", "IcacheBankingPass"),
        "snowflake-lower": p("pipelines", "SnowflakeLowerPass"),
    }
