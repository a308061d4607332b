"""Leader election: what the controller writes into a partition's state when brokers come and go.

``elect`` is a pure function of a partition's state, its replicas (the preferred leader first)
and the live brokers, so every case can be tested without a cluster:

* the leader is live and was not restarted: the leader stays; ISR members that are down leave
  the ISR (the leader epoch is kept: only the ISR changes);
* otherwise (the leader is down, restarted, or there is none): the first replica, in the
  replicas' order, that is live and in the ISR leads, the leader epoch + 1, the ISR is its live
  members. A *restarted* broker (registered again since the controller last confirmed it: it
  was down, however briefly, and may have lost its unflushed tail) is taken only when no other
  ISR member is live;
* no live ISR member: with ``unclean`` (``unclean.leader.election.enable``) the first live
  replica leads with an ISR of itself, which may lose acknowledged records; without it the
  partition has no leader (-1, the epoch + 1, the ISR kept as it was, so that one of its
  members leads again when it is back).

``preferred`` is ElectLeaders' PREFERRED election: the first replica leads if it is live and
in the ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .partition_state import PartitionState


def elect(
    state: PartitionState,
    replicas: Sequence[int],
    live: Collection[int],
    restarted: Collection[int] = (),
    unclean: bool = False,
    controller_epoch: int = 0,
) -> PartitionState | None:
    """The state to write after a change of the live brokers; None when it stays."""
    up = [b for b in live if b not in restarted]
    isr_up = [b for b in state.isr if b in up]
    if state.leader >= 0 and state.leader in up:
        if len(isr_up) == len(state.isr) or not isr_up:
            return None
        return PartitionState(state.leader, state.leader_epoch, tuple(isr_up), controller_epoch)
    candidates = [r for r in replicas if r in isr_up]
    if candidates:
        return PartitionState(
            candidates[0], state.leader_epoch + 1, tuple(isr_up), controller_epoch
        )
    isr_back = [b for b in state.isr if b in live]  # restarted ISR members
    candidates = [r for r in replicas if r in isr_back]
    if candidates:
        return PartitionState(
            candidates[0], state.leader_epoch + 1, tuple(isr_back), controller_epoch
        )
    if unclean:
        alive = [r for r in replicas if r in live]
        if alive:
            return PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), controller_epoch)
    if state.leader < 0:
        return None
    return PartitionState(-1, state.leader_epoch + 1, state.isr, controller_epoch)


def preferred(
    state: PartitionState, replicas: Sequence[int], live: Collection[int], controller_epoch: int
) -> PartitionState | None:
    """The first replica leads (PREFERRED election); None when it already does or cannot
    (down, or not in the ISR)."""
    if not replicas or state.leader == replicas[0]:
        return None
    first = replicas[0]
    if first not in live or first not in state.isr:
        return None
    return PartitionState(first, state.leader_epoch + 1, state.isr, controller_epoch)
