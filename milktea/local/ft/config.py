"""What a fault-tolerant run is told besides its scheme: the torchft settings (`FTConfig`)
and the faults to inject (`Kill`). Every setting is checked here, before a process starts.

    >>> FTConfig(heartbeat_ms=500).heartbeat_ms
    500
    >>> Kill(group=2, at_step=5, restart_after=10.0)
    Kill(group=2, at_step=5, restart_after=10.0)
    >>> check_groups([0, 1, 1])
    Traceback (most recent call last):
    ...
    ValueError: group id 1 is given twice: each replica group needs an id of its own (0, 1, 2, ...)
"""
from __future__ import annotations

from dataclasses import dataclass

from ...checks import check_int, check_number

PREFIX = "group"     # a replica group's id on the lighthouse: "group2", then torchft's ":<uuid>"


def replica_id(group: int) -> str:
    return f"{PREFIX}{group}"


@dataclass(frozen=True)
class FTConfig:
    """torchft's knobs, with defaults small enough for one machine (seconds unless named).

    heartbeat_ms: the lighthouse counts a replica group dead when it has not heard its
        heartbeat for this long (torchft's default is 5000).
    join_ms: how long the lighthouse waits for heartbeating stragglers before it issues a
        quorum without them (torchft's default 60000).
    timeout_s: the Manager's timeout for a collective, a commit and a recovery transfer.
    quorum_timeout_s: how long a group waits for a quorum before it gives up.
    connect_s: how long a group tries to reach the lighthouse and its peers.
    min_groups: the fewest replica groups a quorum (and a commit) may have.
    pace_s: the least time an inner step takes (the group sleeps the rest): the compute of
        a larger model on a slower chip, on a machine with few cores (0: as fast as it runs).
    threads: torch threads per group.
    host: the address this machine's groups and lighthouse are reached at.
    """
    heartbeat_ms: int = 1000
    join_ms: int = 5000
    timeout_s: float = 10.0
    quorum_timeout_s: float = 60.0
    connect_s: float = 10.0
    min_groups: int = 1
    pace_s: float = 0.0
    threads: int = 1
    host: str = "127.0.0.1"

    def __post_init__(self):
        check_int(self.heartbeat_ms, "heartbeat_ms", 50)
        check_int(self.join_ms, "join_ms", 0)
        for name in ("timeout_s", "quorum_timeout_s", "connect_s"):
            check_number(getattr(self, name), name, 0, open_low=True)
        check_int(self.min_groups, "min_groups", 1)
        check_number(self.pace_s, "pace_s", 0)
        check_int(self.threads, "threads", 1)
        if not isinstance(self.host, str) or not self.host:
            raise TypeError(f"host must be a host name or address (a non-empty str), got {self.host!r}")


@dataclass(frozen=True)
class Kill:
    """SIGKILL replica group `group` halfway through outer step `at_step` (counted from 0),
    and start it again `restart_after` seconds later (None: it stays dead)."""
    group: int
    at_step: int
    restart_after: float | None = None

    def __post_init__(self):
        check_int(self.group, "kill group", 0)
        check_int(self.at_step, "kill at_step", 0)
        if self.restart_after is not None:
            check_number(self.restart_after, "restart_after", 0)


def check_groups(groups) -> list[int]:
    """Replica group ids: an int n means 0 .. n-1; a list must hold each id once."""
    if isinstance(groups, bool):
        raise TypeError(f"groups must be a number of groups or a list of group ids, got {groups!r}")
    if isinstance(groups, int):
        return list(range(check_int(groups, "groups", 1)))
    if not isinstance(groups, (list, tuple)) or not groups:
        raise TypeError(f"groups must be a number of groups or a non-empty list of group ids, got {groups!r}")
    seen = set()
    for g in groups:
        check_int(g, "group id", 0)
        if g in seen:
            raise ValueError(f"group id {g} is given twice: each replica group needs an id of its own (0, 1, 2, ...)")
        seen.add(g)
    return list(groups)


def check_kills(kills, groups: list[int], outer_steps: int) -> tuple:
    kills = tuple(kills or ())
    for k in kills:
        if not isinstance(k, Kill):
            raise TypeError(f"faults must be milktea.local.ft.Kill(group, at_step, restart_after), "
                            f"got {type(k).__name__}")
        if k.group not in groups:
            raise ValueError(f"Kill(group={k.group}): there is no replica group {k.group} (groups {groups})")
        if k.at_step >= outer_steps:
            raise ValueError(f"Kill(at_step={k.at_step}): the run has only {outer_steps} outer steps (0 .. "
                             f"{outer_steps - 1})")
    if len({k.group for k in kills}) != len(kills):
        raise ValueError("one Kill per replica group: a group killed twice needs a run of its own")
    if len(kills) >= len(groups) and all(k.restart_after is None for k in kills):
        raise ValueError("every replica group would be killed for good: nobody is left to finish the run")
    return kills
