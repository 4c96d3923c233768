"""
The base of the `tile` ops, as xDSL's riscv dialect keeps its in abstract_ops.py:
`TileOperation` (property readers and the checks every verifier uses, each error naming its
layer), the `LayerScope` trait that marks the layer an error is named by, `body_ops` (a tile's
body, empty when it is to be derived) and the property builders the ops share.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from functools import lru_cache
from typing import Self

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, StringAttr, i64
from xdsl.ir import Block, Operation
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import OpTrait
from xdsl.utils.exceptions import VerifyException


@lru_cache(maxsize=1 << 16)
def i64_attr(v: int) -> IntegerAttr:
    # attributes are immutable: a network's tiles repeat a few hundred values 10^4 times
    return IntegerAttr(v, i64)


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


class LayerScope(OpTrait):
    """The op a tile op's verifier errors are named by (`tile.layer @conv2: ...`): a layer. A
    trait, so the base here finds the layer without importing the op that is one."""


class TileOperation(IRDLOperation, ABC):
    irdl_options = (ParsePropInAttrDict(),)

    def _int(self, name: str) -> int:
        attr = self.properties[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def _ints(self, name: str) -> tuple[int, ...]:
        attr = self.properties[name]
        assert isinstance(attr, DenseArrayBase)
        return tuple(int(v) for v in attr.get_values())

    def _fail(self, message: str) -> None:
        layer = self if self.has_trait(LayerScope) else self.parent_op()
        while layer is not None and not layer.has_trait(LayerScope, value_if_unregistered=False):
            layer = layer.parent_op()
        sym_name = layer.properties.get("sym_name") if layer is not None else None
        where = f"tile.layer @{sym_name.data}: " if isinstance(sym_name, StringAttr) else ""
        what = "" if layer is self else f"{self.name}: "
        raise VerifyException(f"{where}{what}{message}")

    def verify(self, verify_nested_ops: bool = True) -> None:
        # every tile op refuses attributes it does not define, here rather than in each verify_():
        # xDSL checks the required properties before verify_(), so a misspelt one (`out_rws`)
        # would read as missing with no layer named: the unknown attribute is the news
        self._no_stray_attributes()
        super().verify(verify_nested_ops)

    def _no_stray_attributes(self) -> None:
        """An attribute the op does not define would be silently ignored by every pass: refuse it."""
        for key in self.attributes:
            known = ", ".join(sorted(self.properties.keys() | {n for n in type(self).get_irdl_definition().properties}))
            self._fail(f"unknown attribute '{key}' (this op's attributes: {known})")

    def _nonneg(self, *names: str) -> None:
        for n in names:
            if self._int(n) < 0:
                self._fail(f"{n} must be >= 0, got {self._int(n)}")

    def _positive(self, *names: str) -> None:
        for n in names:
            if self._int(n) < 1:
                self._fail(f"{n} must be >= 1, got {self._int(n)}")


def body_ops(op: Operation) -> list[Operation]:
    """The ops of a tile's body; none when it was written empty (`{}`: to be derived) or had its
    ops deleted."""
    region = op.regions[0]
    if len(region.blocks) > 1:
        raise VerifyException(f"{op.name}: its body is one block")
    return list(region.blocks[0].ops) if region.blocks else []


def to_derive(op: Operation) -> bool:
    """Whether a tile's body was written empty, `{}`, to be derived (a body region without a
    block). A body whose ops were all deleted is a block with none: checked as written (a maps
    tile without its only load is refused, not derived again as if nothing were edited)."""
    return not op.regions[0].blocks


class TileBodyOperation(TileOperation, ABC):
    """A kernel or maps tile: `attributes {...}` then its body. The body written `{}` (nothing
    between the braces on one line) is to be derived; braces on separate lines with no op between
    them are a body with no ops (what deleting a tile's only load leaves), kept as written."""

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        attrs = parser.parse_optional_attr_dict_with_keyword()
        entries = dict(attrs.data) if attrs is not None else {}
        props = {k: v for k, v in entries.items() if k in cls.get_irdl_definition().properties}
        start = parser.pos
        body = parser.parse_region()
        if not body.blocks and not _written_empty(parser.lexer.input.content, start):
            body.add_block(Block())
        op = cls.create(properties=props, attributes={k: v for k, v in entries.items() if k not in props},
                        regions=[body])
        return op

    def print(self, printer: Printer) -> None:
        printer.print_op_attributes({**self.properties, **self.attributes}, print_keyword=True)
        printer.print_string(" ")
        if to_derive(self):
            printer.print_string("{}")
        else:
            printer.print_region(self.regions[0], print_entry_block_args=False, print_empty_block=False)


def _written_empty(text: str, brace: int) -> bool:
    """Whether the region at `brace` (its `{`) is `{}`: its `}` next, on the same line."""
    rest = text[brace + 1:]
    gap = rest[:len(rest) - len(rest.lstrip())]
    return rest.lstrip().startswith("}") and "\n" not in gap
