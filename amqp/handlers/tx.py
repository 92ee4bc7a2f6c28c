"""tx.select / commit / rollback.

In tx mode the channel queues publishes, acks, nacks and rejects (validated
when they arrive) and applies them in order at ``tx.commit``; ``rollback``
drops them. As in RabbitMQ, returns for unroutable mandatory messages go out
before commit-ok.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from leveret.model.errors import PRECONDITION_FAILED, ChannelError

if TYPE_CHECKING:
    from leveret.amqp.channel import Channel


def select(ch: Channel, m: commands.Tx.Select) -> None:
    if ch.confirms is not None:
        raise ChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
    if ch.tx is None:
        ch.tx = []
    ch.output.send_method(commands.Tx.SelectOk())


def commit(ch: Channel, m: commands.Tx.Commit) -> None:
    if ch.tx is None:
        raise ChannelError(PRECONDITION_FAILED, "channel is not transactional")
    pending, ch.tx = ch.tx, []
    # Everything is recorded in this loop turn, so it lands in one store batch: one
    # transaction, all or nothing. commit-ok waits for that batch when it holds anything.
    ch.tx_durable = False
    try:
        for fn, args in pending:
            fn(*args)
    finally:
        durable, ch.tx_durable = ch.tx_durable, None
    # Waits for the commit, and holds back what the channel says next, if it wrote anything.
    ch.output.send_durable(ch, commands.Tx.CommitOk(), durable, (90, 20))


def rollback(ch: Channel, m: commands.Tx.Rollback) -> None:
    if ch.tx is None:
        raise ChannelError(PRECONDITION_FAILED, "channel is not transactional")
    ch.tx = []
    ch.output.send_method(commands.Tx.RollbackOk())


HANDLERS: dict[int, Callable[..., None]] = {
    commands.Tx.Select.index: select,
    commands.Tx.Commit.index: commit,
    commands.Tx.Rollback.index: rollback,
}
