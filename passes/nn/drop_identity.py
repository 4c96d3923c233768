"""
drop-identity: remove `nn.identity` (ONNX Identity and inference-mode Dropout).

They compute nothing; keeping them would cost a copy layer on the device.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn


class DropIdentity(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.IdentityOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class DropIdentityPass(ModulePass):
    name = "drop-identity"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(DropIdentity()).rewrite_module(op)
