"""`Timeline` for MXNet: what runs where, from ``mx.profiler`` when the
build has it, else from one watcher thread per device."""
import json
import os
import queue
import tempfile
import threading
import time

import mxnet as mx
from mxnet import npx

from d2lpar import _common
from d2lpar import standins as _standins
from d2lpar.i18n import N_


def _kind(name):
    return 'copy' if 'copy' in name.lower() else 'compute'


class Timeline(_common.Timeline):
    """Record what runs where inside a ``with`` block, then `plot` it.

    With an MXNet build that has its profiler, ``mx.profiler`` records
    every operator. The pip wheel has it compiled out
    (``mx.runtime.Features()``); then one watcher thread per device waits,
    in order, for each result passed to ``watch(arrays, label, kind)`` and
    notes when it became ready. A bar ends at that moment and starts when
    the previous result on the same device became ready (or when it was
    queued, if later). The thread that pushes the work never waits, so
    MXNet's asynchrony is left intact.
    """

    def __enter__(self):
        npx.waitall()  # leave earlier work out of the picture
        self._t0 = time.perf_counter()
        self._profiler = mx.runtime.Features().is_enabled('PROFILER')
        if self._profiler:
            self.source = 'mx.profiler'
            fd, self._file = tempfile.mkstemp(suffix='.json')
            os.close(fd)
            mx.profiler.set_config(profile_all=True, aggregate_stats=False,
                                   filename=self._file)
            mx.profiler.set_state('run')
        else:
            self.source = N_('a watcher thread per device')
            self._queues, self._threads = {}, []
        return self

    def watch(self, arrays, label, kind='compute'):
        if self._profiler:
            return arrays
        pushed = time.perf_counter() - self._t0
        for a in _standins.flat(_standins.resolve([arrays])):
            row = str(a.ctx)
            if row not in self._queues:
                self._queues[row] = queue.Queue()
                thread = threading.Thread(target=self._watch_row, args=(
                    row, self._queues[row]), daemon=True)
                thread.start()
                self._threads.append(thread)
            self._queues[row].put((label, kind, a, pushed))
        return arrays

    def _watch_row(self, row, todo):
        last = 0.0
        while (item := todo.get()) is not None:
            label, kind, array, pushed = item
            array.wait_to_read()
            end = time.perf_counter() - self._t0
            self.events.append(_common.Event(label, row, max(pushed, last),
                                             end, kind))
            last = end

    def __exit__(self, *exc_info):
        if self._profiler:
            npx.waitall()
            mx.profiler.set_state('stop')
            mx.profiler.dump()
            with open(self._file) as f:
                self.events = _common.events_from_chrome_trace(json.load(f),
                                                               _kind)
            os.remove(self._file)
        else:
            for todo in self._queues.values():
                todo.put(None)
            for thread in self._threads:
                thread.join()
            self.events.sort(key=lambda e: e.start)
        return False
