"""Timelines: which operation ran on which device or thread, and when;
drawn as a Gantt chart or saved as a Chrome trace. The backends record
the events (d2lpar.torch with its profiler, d2lpar.mxnet with its
profiler or notes that MXNet's engine takes when each result is ready).
"""
import dataclasses
import os

from d2lpar import fonts
from d2lpar.i18n import N_, _


@dataclasses.dataclass
class Event:
    """One operation on a timeline; times in seconds from its start."""
    name: str
    row: str
    start: float
    end: float
    kind: str = 'compute'  # or 'copy'


KIND_COLORS = {'compute': 'tab:blue', 'copy': 'tab:orange',
               'communication': 'tab:red', 'other': 'tab:gray'}
# What the legends call each kind (translated when drawn)
KIND_LABELS = {'compute': N_('compute'), 'copy': N_('copy'),
               'other': N_('other'), 'communication': N_('communication')}


def row_label(row):
    """The name of a timeline row ('main thread', 'CPU thread 1', 'cpu:0
    copy', 'cuda:0', ...) in the lesson's language."""
    if row.startswith('CPU thread ') and row[11:].isdigit():
        return _('CPU thread {n}').format(n=int(row[11:]))
    if row.endswith(' copy'):
        return _('{device} copy').format(device=row[:-5])
    return _(row)  # 'main thread'; a device's name stays as it is


class Timeline:
    """Record what runs where inside a ``with`` block, then `plot` it.

    The backends say how events are recorded (PyTorch: its profiler;
    MXNet: its profiler when the build has one, else notes that MXNet's
    engine takes when each result is ready). `watch(arrays, label, kind)`
    names results for backends that need it and returns them unchanged.
    """
    source = N_('nothing')  # what recorded the events, for the title

    def __init__(self):
        self.events = []

    def watch(self, arrays, label, kind='compute'):
        return arrays

    def rows(self):
        return sorted({e.row for e in self.events})

    def plot(self, title=None, ax=None):
        """A Gantt chart: one row per device or thread (a GPU has one row
        for all of its streams); compute and copies in different colours;
        time in milliseconds. A row with work of several kinds is cut
        into lanes, one per kind, so that a copy that overlaps a
        computation of the same device (a GPU's side stream) is drawn
        beside it rather than over it."""
        import matplotlib.pyplot as plt
        fonts.use_cjk_font()  # Chinese text, no missing glyph
        from matplotlib.patches import Patch
        rows = self.rows()
        if ax is None:
            ax = plt.subplots(figsize=(6.5, 0.5 * len(rows) + 1.1))[1]
        lanes = {}  # (row, kind) -> (bottom, height) of its bars
        for y, row in enumerate(rows):
            kinds = [k for k in KIND_COLORS if any(
                e.row == row and e.kind == k for e in self.events)]
            for i, kind in enumerate(kinds):
                height = 0.7 / len(kinds)
                lanes[row, kind] = (y - 0.35 + i * height, height)
                spans = [(1e3 * e.start, max(1e3 * (e.end - e.start), 1e-3))
                         for e in self.events if e.row == row
                         and e.kind == kind]
                ax.broken_barh(spans, lanes[row, kind], color=KIND_COLORS[
                    kind], edgecolor='white', linewidth=0.3)
        total = max((e.end for e in self.events), default=1)
        for e in self.events:  # name the bars that are wide enough
            if e.end - e.start > 0.08 * total:
                bottom, height = lanes[e.row, e.kind]
                ax.text(1e3 * (e.start + e.end) / 2, bottom + height / 2,
                        e.name, ha='center', va='center', fontsize=7,
                        color='white', clip_on=True)
        ax.set_yticks(range(len(rows)), [row_label(r) for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel(_('milliseconds'))
        kinds = sorted({e.kind for e in self.events})
        ax.legend(handles=[Patch(color=KIND_COLORS[k],
                                 label=_(KIND_LABELS.get(k, k)))
                           for k in kinds], fontsize=8, frameon=False,
                  loc='lower left', bbox_to_anchor=(1.0, 0.0))
        ax.set_title(title or _('recorded with {source}').format(
            source=_(self.source)), fontsize=10)
        plt.tight_layout()
        plt.show()
        return ax

    def save(self, path):
        """Write the events as a Chrome trace (JSON) that Perfetto
        (ui.perfetto.dev) or chrome://tracing can open."""
        import json
        rows = self.rows()
        trace = [{'name': e.name, 'cat': e.kind, 'ph': 'X', 'pid': 0,
                  'tid': rows.index(e.row), 'ts': 1e6 * e.start,
                  'dur': 1e6 * (e.end - e.start)} for e in self.events]
        trace += [{'name': 'thread_name', 'ph': 'M', 'pid': 0, 'tid': i,
                   'args': {'name': row}} for i, row in enumerate(rows)]
        with open(path, 'w') as f:
            json.dump({'traceEvents': trace}, f)
        return path


def events_from_chrome_trace(trace, classify):
    """Events of a Chrome trace dict (complete 'X' events or 'B'/'E'
    pairs), rows named by process and thread, times from the first one."""
    names = {(e.get('pid'), e.get('tid')): e['args']['name']
             for e in trace.get('traceEvents', [])
             if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    spans, open_ = [], {}
    for e in trace.get('traceEvents', []):
        key = (e.get('pid'), e.get('tid'))
        if e.get('ph') == 'X':
            spans.append((e['name'], key, e['ts'], e['ts'] + e['dur']))
        elif e.get('ph') == 'B':
            open_.setdefault((key, e['name']), []).append(e['ts'])
        elif e.get('ph') == 'E' and open_.get((key, e.get('name'))):
            start = open_[(key, e['name'])].pop()
            spans.append((e['name'], key, start, e['ts']))
    if not spans:
        return []
    t0 = min(s[2] for s in spans)
    return [Event(name, names.get(key, f'{key[0]}/{key[1]}'),
                  (start - t0) / 1e6, (end - t0) / 1e6, classify(name))
            for name, key, start, end in sorted(spans, key=lambda s: s[2])]


class quiet_stderr:
    """Silence what C++ libraries print on file descriptor 2 (e.g. the
    profiler's start/stop log lines) for the duration of a block."""

    def __enter__(self):
        import sys
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc_info):
        os.dup2(self._saved, 2)
        os.close(self._saved)
