"""``agent fleet status``: every actor of a session as its retained status says.

Each actor publishes its status (state, device, host, adapter version, steps/s, episodes, spool, refused versions)
retained, so a newcomer reads the latest of each at once; an actor whose connection died shows ``offline`` (its
last will, which the broker published). ``last seen`` is the age of the newest status: an actor publishes one at
every change of state and version and after every episode, so a ``running`` actor not seen for minutes is stuck or
has an episode longer than that. ``episodes`` counts the actor's whole run folder (every process that used it:
its spool's ``produced.log``), not only the process running now. ``spooled`` is what the actor's spool holds now: the actor republishes its status
when that number changes (an acknowledgement empties it), so a retained "1 spooled" is not left behind.

The first line is the learner's own (``agent.fleet.record.learner_row``): ``up`` with its version and how many
messages wait to be trained, ``stopped``, or ``down`` (its last will: the connection died) since its last status,
with the last version it announced. The announced version shown is the retained announcement, which outlives a
learner that is down.
"""

from __future__ import annotations

from typing import Any

from train.messages import ActorStatus


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def status_rows(statuses: dict[str, ActorStatus], *, now: float) -> list[dict[str, Any]]:
    """One row per actor, by name."""
    return [{"actor": s.actor, "state": s.state, "device": s.device, "host": s.host, "version": s.version,
             "steps_per_s": s.steps_per_s, "episodes": s.episodes, "steps": s.steps, "restarts": s.restarts,
             "spooled": s.spooled, "refused": s.refused, "last_seen_s": round(max(0.0, now - s.at), 1),
             "error": s.error}
            for s in sorted(statuses.values(), key=lambda s: s.actor)]


def learner_line(learner: dict[str, Any]) -> str:
    """The learner's line: ``learner  up on HOST, v..., N pending, seen ...`` or ``down since ...``."""
    from agent.terminal import plain

    state = str(learner.get("state") or "unknown")
    where = f" on {plain(learner['host'])}" if learner.get("host") else ""
    version = f", last version {plain(str(learner['version']))}" if learner.get("version") else ""
    seen = learner.get("last_seen_s")
    if state == "down":
        since = f" since {_age(seen)}" if seen is not None else ""
        return f"learner  down{since} (its connection died: its last will){where}{version}"
    pending = f", {learner['pending']} pending" if learner.get("pending") else ""
    ago = f", seen {_age(seen)}" if seen is not None else ""
    return f"learner  {plain(state)}{where}{version}{pending}{ago}"


def status_table(console: Any, broker: str, policy: str | None, rows: list[dict[str, Any]], *,
                 learner: dict[str, Any] | None = None) -> None:
    """The rows on ``console`` (rich), the learner's line first, one line per actor (an error on the next)."""
    from agent.terminal import plain

    console.print(f"{plain(broker)}: announced version {plain(policy or 'none yet')}, {len(rows)} actors")
    if learner is not None:
        console.print(learner_line(learner), soft_wrap=True)
    if not rows:
        console.print("no actor has published a status on this session's topics")
        return
    width = max(len(r["actor"]) for r in rows)
    for r in rows:
        where = f"{r['device'] or '?'}" + (f" on {r['host']}" if r["host"] else "")
        extra = "".join(f", {r[k]} {label}" for k, label in (("spooled", "spooled"), ("refused", "refused"))
                        if r[k])
        console.print(f"{plain(r['actor']):<{width}}  {plain(r['state']):<10} {plain(where)}  "
                      f"{plain(r['version'] or 'no version')}  {r['steps_per_s']:.2f} steps/s  {r['episodes']} "
                      f"episodes{extra}  seen {_age(r['last_seen_s'])}", soft_wrap=True)
        if r["error"]:
            console.print(f"{'':<{width}}  {plain(r['error'])}", soft_wrap=True)
