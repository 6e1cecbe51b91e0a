"""Where each record of a run goes in its Chrome trace: the spans of the GPUs' roles, of the
steps and their stages, of the resize phases, and the decisions as instants.

Every function here adds one kind of event to a `TraceEvents`, a column at a time from the
records' columns (see `chrome_trace` for the tracks and how stages are placed in each mode).
"""

from __future__ import annotations

import numpy as np

from .chrome_events import Instants, Spans, TraceEvents, json_texts, microseconds
from .chrome_records import RecordColumns, present, text
from .chrome_tracks import track_metadata
from .phases import PhaseName, PipelineMode

__all__ = [
    "DECISION_TID",
    "GPU_PID",
    "PIPELINE_PID",
    "RESIZE_PID",
    "STAGE_TRACKS",
    "decision_events",
    "device_role_events",
    "resize_events",
    "resize_windows",
    "stage_events",
]

GPU_PID = 1
PIPELINE_PID = 2
RESIZE_PID = 3
STAGE_TRACKS = {"step": 0, "rollout": 1, "train": 2, "sync": 3}
DECISION_TID = len(PhaseName)

# --- GPUs: each device's role over time -----------------------------------------------------


def _role_codes(steps: RecordColumns) -> tuple[np.ndarray, list[str]]:
    """Role of every device at every step as codes into the role names (-1: no such device).
    Steps repeat a handful of role maps: each distinct one is read once."""
    code_of: dict[str, int] = {}
    row_of: dict[tuple, int] = {}
    rows: list[list[int]] = []
    index = []
    for k, roles in zip(steps.values("step"), steps.optional("device_roles"), strict=True):
        if roles is None:
            raise ValueError(f"step {k} has no device_roles")
        key = tuple(roles)
        row = row_of.get(key)
        if row is None:
            row = row_of[key] = len(rows)
            rows.append([code_of.setdefault(text(r), len(code_of)) for r in key])
        index.append(row)
    table = np.full((len(rows), max(len(r) for r in rows)), -1, dtype=np.int64)
    for row, codes in enumerate(rows):
        table[row, : len(codes)] = codes
    return table[np.array(index, dtype=np.int64)], list(code_of)


def device_role_events(
    events: TraceEvents, steps: RecordColumns, windows: dict[int, tuple[float, float]]
) -> None:
    """Per device: consecutive steps in one role merged into one span, and a switch span over
    the resize that moved it."""
    matrix, role_names = _role_codes(steps)
    start, end = steps.floats("start_s"), steps.floats("end_s")
    numbers = steps.ints("step")
    resize_ids = steps.optional("resize_id")
    window_at = [windows.get(int(r)) if present(r) else None for r in resize_ids]
    role_json = json_texts(role_names)
    labels = [*role_names, "None"]
    for device in range(matrix.shape[1]):
        events.add(track_metadata(GPU_PID, device, f"GPU {device}", device))
        codes = matrix[:, device]
        change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        # switches: a device changing role at a step that a resize with a known window began
        moved = [i for i in change.tolist() if codes[i - 1] >= 0 and window_at[i] is not None]
        # role spans: runs of one role, each closed where the next run (or the run) begins
        firsts = np.concatenate([[0], change])
        lasts = np.concatenate([change - 1, [len(codes) - 1]])
        held = codes[firsts] >= 0
        firsts, lasts = firsts[held], lasts[held]
        closes_at = lasts + 1
        order = np.lexsort(
            (
                np.concatenate([np.zeros(len(moved)), np.ones(len(firsts))]),
                np.concatenate([np.array(moved, dtype=np.int64), closes_at]),
            )
        )
        switch_names = json_texts(
            f"switch {labels[codes[i - 1]]}→{labels[codes[i]]}" for i in moved
        )
        role_codes = codes[firsts].tolist()
        names = switch_names + [role_json[c] for c in role_codes]
        cats = ['"resize"'] * len(moved) + ['"role"'] * len(firsts)
        args = [f'{{"resize_id":{int(resize_ids[i])}}}' for i in moved] + [
            f'{{"device":{device},"role":{role_json[c]},"first_step":{k}}}'
            for c, k in zip(role_codes, numbers[firsts].tolist(), strict=True)
        ]
        lo = np.concatenate([[window_at[i][0] for i in moved], start[firsts]])  # type: ignore[index]
        hi = np.concatenate([[window_at[i][1] for i in moved], end[lasts]])  # type: ignore[index]
        picked = order.tolist()
        events.add(
            Spans.between(
                names=[names[i] for i in picked],
                pid=GPU_PID,
                tid=device,
                start_s=lo[order],
                end_s=hi[order],
                cat=[cats[i] for i in picked],
                args=[args[i] for i in picked],
            )
        )


def resize_windows(resizes: RecordColumns) -> dict[int, tuple[float, float]]:
    """Span of each resize's critical phases (of all its phases if none is critical)."""
    if not len(resizes):
        return {}
    ids = resizes.ints("resize_id")
    critical = np.array([bool(v) for v in resizes.values("critical")], dtype=bool)
    start, end = resizes.floats("start_s"), resizes.floats("end_s")
    unique, inverse = np.unique(ids, return_inverse=True)
    any_critical = np.zeros(len(unique), dtype=bool)
    np.logical_or.at(any_critical, inverse, critical)
    use = critical | ~any_critical[inverse]
    lo = np.full(len(unique), np.inf)
    hi = np.full(len(unique), -np.inf)
    np.minimum.at(lo, inverse[use], start[use])
    np.maximum.at(hi, inverse[use], end[use])
    return dict(zip(unique.tolist(), zip(lo.tolist(), hi.tolist(), strict=True), strict=True))


# --- Pipeline: steps and their stages -------------------------------------------------------

_SLOTS = ("step", "rollout", "next rollout", "train", "sync")
"""A step's spans in the order they are listed: the step, the rollout of its own batch, the
rollout of the next batch beside its training (one-step-off), its training, its weight sync."""


def stage_events(events: TraceEvents, steps: RecordColumns, mode: PipelineMode | None) -> None:
    for name, tid in STAGE_TRACKS.items():
        events.add(track_metadata(PIPELINE_PID, tid, name, tid))
    n = len(steps)
    k = steps.ints("step")
    start, end = steps.floats("start_s"), steps.floats("end_s")
    rollout_s, train_s, sync_s = (steps.floats(c) for c in ("rollout_s", "train_s", "sync_s"))
    batch = np.array(
        [
            int(b) if present(b) else s
            for b, s in zip(steps.optional("rollout_batch_id"), k.tolist(), strict=True)
        ],
        dtype=np.int64,
    )
    own = np.ones(n, dtype=bool)
    following = np.zeros(n, dtype=bool)
    if mode in (PipelineMode.SYNC, PipelineMode.COLOCATED):
        train_start = start + rollout_s
    elif mode is PipelineMode.ONE_STEP_OFF:
        # the run's first step (or one after a gap) generates its own batch first; every step
        # followed by the next one generates that one's batch beside its training
        own[1:] = k[:-1] != k[1:] - 1
        following[:-1] = k[1:] == k[:-1] + 1
        train_start = np.where(own, start + rollout_s, start)
    else:
        train_start = start
    next_rollout_s = np.append(rollout_s[1:], 0.0)
    next_batch = np.append(batch[1:], 0)
    listed = np.column_stack([np.ones(n, bool), own, following, np.ones(n, bool), np.ones(n, bool)])
    lo = np.column_stack([start, start, train_start, train_start, end - sync_s])
    hi = np.column_stack(
        [end, start + rollout_s, train_start + next_rollout_s, train_start + train_s, end]
    )
    tids = np.array([STAGE_TRACKS[s.split()[-1]] for s in _SLOTS], dtype=np.int64)
    allocation = [
        f'"{t}:{r}"'
        for t, r in zip(
            steps.ints("train_gpus").tolist(), steps.ints("rollout_gpus").tolist(), strict=True
        )
    ]
    tokens = [int(v) for v in steps.optional("tokens", 0)]
    names: list[str] = []
    cats: list[str] = []
    args: list[str] = []
    rows = zip(
        k.tolist(),
        allocation,
        tokens,
        batch.tolist(),
        next_batch.tolist(),
        listed.tolist(),
        strict=True,
    )
    for step, alloc, tok, b, nb, (_, has_own, has_next, _, _) in rows:
        common = f'{{"step":{step},"allocation":{alloc}'
        names.append(f'"step {step}"')
        cats.append('"step"')
        args.append(f'{common},"tokens":{tok}}}')
        if has_own:
            names.append(f'"rollout {b}"')
            cats.append('"stage"')
            args.append(f'{common},"rollout_batch_id":{b}}}')
        if has_next:
            names.append(f'"rollout {nb}"')
            cats.append('"stage"')
            args.append(f'{common},"rollout_batch_id":{nb}}}')
        names += [f'"train {step}"', f'"sync {step}"']
        cats += ['"stage"', '"stage"']
        args += [f"{common}}}", f"{common}}}"]
    flat = listed.ravel()
    events.add(
        Spans.between(
            names=names,
            pid=PIPELINE_PID,
            tid=np.tile(tids, n)[flat],
            start_s=lo.ravel()[flat],
            end_s=hi.ravel()[flat],
            cat=cats,
            args=args,
        )
    )


# --- Resizes: phases and decisions ----------------------------------------------------------

_PHASE_TIDS = {p.value: tid for tid, p in enumerate(PhaseName)}
"""Track of each resize phase: its place among the phase names."""


def _phase_tid(phase: str) -> int:
    tid = _PHASE_TIDS.get(phase)
    if tid is None:
        raise ValueError(f"unknown resize phase {phase!r}")
    return tid


def resize_events(events: TraceEvents, resizes: RecordColumns) -> None:
    if not len(resizes):
        return
    phase_values = resizes.values("phase")
    text_of = {p: text(p) for p in set(phase_values)}
    phases = [text_of[p] for p in phase_values]
    tids = np.array([_phase_tid(p) for p in phases], dtype=np.int64)
    seen = set(phases)
    for known in PhaseName:
        if known.value in seen:
            tid = _phase_tid(known.value)
            events.add(track_metadata(RESIZE_PID, tid, known.value, tid))
    critical = [bool(v) for v in resizes.values("critical")]
    texts = [
        json_texts(resizes.values(c), text)
        for c in ("strategy", "from_allocation", "to_allocation")
    ]
    moved = [int(v or 0) for v in resizes.optional("bytes_moved", 0)]
    rows = zip(resizes.ints("resize_id").tolist(), *texts, critical, moved, strict=True)
    args = [
        f'{{"resize_id":{rid},"strategy":{strategy},"from":{src},"to":{dst},'
        f'"critical":{"true" if crit else "false"},"bytes_moved":{moved}}}'
        for rid, strategy, src, dst, crit, moved in rows
    ]
    events.add(
        Spans.between(
            names=json_texts(phases),
            pid=RESIZE_PID,
            tid=tids,
            start_s=resizes.floats("start_s"),
            end_s=resizes.floats("end_s"),
            cat=['"critical"' if c else '"background"' for c in critical],
            args=args,
        )
    )


def decision_events(events: TraceEvents, decisions: RecordColumns) -> None:
    if not len(decisions):
        return
    events.add(track_metadata(RESIZE_PID, DECISION_TID, "policy decisions", DECISION_TID))
    targets = [text(v) if present(v) else None for v in decisions.optional("to_allocation")]
    policy, source, reason = (
        json_texts(values, text)
        for values in (
            decisions.values("policy"),
            decisions.values("from_allocation"),
            decisions.optional("reason", ""),
        )
    )
    rows = zip(
        decisions.ints("step").tolist(), policy, source, json_texts(targets), reason, strict=True
    )
    events.add(
        Instants(
            names=json_texts(decisions.values("decision"), text),
            pid=RESIZE_PID,
            tid=DECISION_TID,
            ts_us=microseconds(decisions.floats("time_s")),
            cat='"decision"',
            args=[
                f'{{"step":{k},"policy":{p},"from":{f},"to":{t},"reason":{r}}}'
                for k, p, f, t, r in rows
            ],
        )
    )
