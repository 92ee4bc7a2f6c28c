"""confirm.select: switch the channel to publisher-confirm mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.confirms.tracker import ConfirmTracker
from leveret.model.errors import PRECONDITION_FAILED, ChannelError

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel


def select(ch: Channel, m: commands.Confirm.Select) -> None:
    if ch.tx is not None:
        raise ChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
    if ch.confirms is None:
        ch.confirms = ConfirmTracker()
    if not m.nowait:
        ch.output.send_method(commands.Confirm.SelectOk())


HANDLERS: dict[int, Callable[..., None]] = {commands.Confirm.Select.index: select}
