"""snowir passes, one per file; `all_passes()` is the registry snow-opt and the API use."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def p(module: str, cls: str) -> Callable[[], type[ModulePass]]:
        def load() -> type[ModulePass]:
            import importlib

            return getattr(importlib.import_module(f"snowir.passes.{module}"), cls)

        return load

    return {
        "drop-identity": p("drop_identity", "DropIdentityPass"),
        "fold-batch-norm": p("fold_batch_norm", "FoldBatchNormPass"),
        "fuse-relu": p("fuse_relu", "FuseReluPass"),
        "fuse-residual-add": p("fuse_residual_add", "FuseResidualAddPass"),
        "fc-to-conv": p("fc_to_conv", "FcToConvPass"),
        "avgpool-to-conv": p("avgpool_to_conv", "AvgPoolToConvPass"),
        "depthwise-to-grouped": p("depthwise_to_grouped", "DepthwiseToGroupedPass"),
        "fold-hard-swish": p("fold_hard_swish", "FoldHardSwishPass"),
        "partition-host": p("partition_host", "PartitionHostPass"),
        "quantize": p("quantize", "QuantizePass"),
        "nn-prepare": p("nn_prepare", "NNPreparePass"),
        "split-kernels": p("split_kernels", "SplitKernelsPass"),
        "space-to-depth": p("space_to_depth", "SpaceToDepthPass"),
        "unfold-rows": p("unfold_rows", "UnfoldRowsPass"),
        "icache-banking": p("icache_banking", "IcacheBankingPass"),
        "nn-to-tile": p("nn_to_tile", "NNToTilePass"),
        "tile-loop-order": p("tile_loop_order", "TileLoopOrderPass"),
        "tile-rows": p("tile_rows", "TileRowsPass"),
        "tile-to-asm": p("tile_to_asm", "TileToAsmPass"),
        "balance-loads": p("balance_loads", "BalanceLoadsPass"),
        "schedule-asm": p("schedule_asm", "ScheduleAsmPass"),
        "fill-delay-slots": p("fill_delay_slots", "FillDelaySlotsPass"),
        "snowflake-lower": p("snowflake_lower", "SnowflakeLowerPass"),
    }
