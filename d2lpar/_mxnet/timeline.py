"""`Timeline` for MXNet: what runs where, from ``mx.profiler`` when the
build has it, else from notes that MXNet's engine takes
(d2lpar/_mxnet/engine.py)."""
import json
import os
import tempfile
import time

import mxnet as mx
from mxnet import npx

from d2lpar import timeline as _timeline
from d2lpar import standins as _standins
from d2lpar._mxnet.engine import _Engine
from d2lpar.i18n import N_


def _kind(name):
    return 'copy' if 'copy' in name.lower() else 'compute'


class Timeline(_timeline.Timeline):
    """Record what runs where inside a ``with`` block, then `plot` it.

    With an MXNet build that has its profiler, ``mx.profiler`` records
    every operator. The pip wheel has it compiled out
    (``mx.runtime.Features()``); then ``watch(arrays, label, kind)`` asks
    the engine to note the time at which each result becomes ready (an
    operation that only reads it, run on the engine's threads for
    prioritised CPU work). A bar ends at that moment and starts when the
    previous result of the same kind on the same device became ready (or
    when it was queued, if later). Nothing waits while the work is
    queued, so MXNet's asynchrony is left intact. (``wait_to_read`` would
    not do: MXNet queues its notice on the thread of ``cpu(0)``, behind
    the work of that stand-in.) A note is the moment the engine ran a
    Python callback, which waits for Python's lock: it can come a little
    after the result was ready. Set `engine_notes` to True to take the
    notes even when the build has its profiler (lesson 3 measures when
    each sum is done, which the profiler's operators do not say).
    """
    engine_notes = False

    def __enter__(self):
        npx.waitall()  # leave earlier work out of the picture
        self._t0 = time.perf_counter()
        self._profiler = (not self.engine_notes and
                          mx.runtime.Features().is_enabled('PROFILER'))
        if self._profiler:
            self.source = 'mx.profiler'
            fd, self._file = tempfile.mkstemp(suffix='.json')
            os.close(fd)
            mx.profiler.set_config(profile_all=True, aggregate_stats=False,
                                   filename=self._file)
            mx.profiler.set_state('run')
        else:
            self.source = N_("notes from MXNet's engine")
            self._watched, self._ready = [], {}
        return self

    def watch(self, arrays, label, kind='compute'):
        if self._profiler:
            return arrays
        pushed = time.perf_counter() - self._t0
        for a in _standins.flat(_standins.resolve([arrays])):
            key = len(self._watched)
            self._watched.append((label, kind, str(a.ctx), pushed))
            _Engine.push(a, None, self._note, key)
        return arrays

    def _note(self, key):
        self._ready[key] = time.perf_counter() - self._t0

    def __exit__(self, *exc_info):
        npx.waitall()
        if self._profiler:
            mx.profiler.set_state('stop')
            mx.profiler.dump()
            with open(self._file) as f:
                self.events = _timeline.events_from_chrome_trace(json.load(f),
                                                               _kind)
            os.remove(self._file)
        else:
            last = {}  # (row, kind) -> when its previous result was ready
            for key, (label, kind, row, pushed) in enumerate(self._watched):
                start = max(pushed, last.get((row, kind), 0.0))
                end = max(self._ready[key], start)
                self.events.append(_timeline.Event(label, row, start, end,
                                                 kind))
                last[row, kind] = end
            self.events.sort(key=lambda e: e.start)
        return False
