"""`Timeline` for PyTorch: what runs where, from ``torch.profiler``."""
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from d2lpar import timeline as _timeline
from d2lpar import standins as _standins
from d2lpar._torch.devices import synchronize
from d2lpar.i18n import N_


def _kind(name):
    return 'copy' if ('copy' in name.lower() or name == 'aten::to'
                      or 'Memcpy' in name or name in ('split', 'allreduce')
                      ) else 'compute'


class Timeline(_timeline.Timeline):
    """Record what runs where inside a ``with`` block, then `plot` it.

    Built on ``torch.profiler`` (CPU activities, plus CUDA ones when there
    is a GPU): every operator of the block is recorded, top-level CPU
    operators in one row per thread, GPU kernels and copies in one row per
    GPU. `watch` only returns its argument: the profiler needs no help.
    `save(path)` writes the profiler's Chrome trace for Perfetto.
    """
    source = 'torch.profiler'
    _workers = ()  # what the stand-ins' workers noted: see __exit__

    def __enter__(self):
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities)
        synchronize()  # leave earlier work out of the picture
        with _timeline.quiet_stderr():
            self._prof.__enter__()
        # The profiler sees only this thread: the stand-ins' workers note
        # their work themselves, on the clock of the marker below
        _standins.recorder.start()
        with record_function('d2lpar: clock'):
            self._clock = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        try:
            synchronize()
        except Exception:
            if exc_info[0] is None:  # else the block's own error says more
                raise
        finally:
            workers = self._workers = _standins.recorder.stop()
            with _timeline.quiet_stderr():
                self._prof.__exit__(*exc_info)
                raw = list(self._prof.events())
        threads, spans, offset = {}, [], 0
        for e in raw:
            if e.name == 'd2lpar: clock':
                offset = e.time_range.start - 1e6 * self._clock
                continue
            if e.device_type == DeviceType.CPU:
                if e.cpu_parent is not None:
                    continue  # only top-level operators
                row = threads.setdefault(e.thread,
                                         f'CPU thread {len(threads)}')
            else:
                row = f'cuda:{e.device_index}'
            spans.append((e.name, row, e.time_range.start, e.time_range.end))
        if len(threads) == 1:  # name the one thread by what it is
            one = N_('main thread') if workers else 'CPU'
            spans = [(n, one if r.startswith('CPU') else r, a, b)
                     for n, r, a, b in spans]
        spans += [(n, r, 1e6 * a + offset, 1e6 * b + offset)
                  for n, r, a, b, _ in workers]
        kinds = {(n, r): k for n, r, _, _, k in workers}
        t0 = min((s[2] for s in spans), default=0)
        self.events = [_timeline.Event(n, r, (a - t0) / 1e6, (b - t0) / 1e6,
                                     kinds.get((n, r), _kind(n)))
                       for n, r, a, b in sorted(spans, key=lambda s: s[2])]
        return False

    def save(self, path):
        """The profiler's Chrome trace, plus the work that the stand-ins'
        workers noted (the profiler does not see their threads): a thread
        per row ('cpu:0', 'cpu:0 copy'), each event's 'cat' its kind."""
        import json
        self._prof.export_chrome_trace(str(path))
        if not self._workers:
            return path
        with open(path) as f:
            trace = json.load(f)
        events = trace['traceEvents']
        clock = next(e['ts'] for e in events
                     if e.get('name') == 'd2lpar: clock')
        rows = sorted({r for _, r, _, _, _ in self._workers})
        pid = 'CPU stand-ins'
        events += [{'name': 'thread_name', 'ph': 'M', 'pid': pid, 'tid': i,
                    'args': {'name': row}} for i, row in enumerate(rows)]
        events += [{'name': n, 'cat': k, 'ph': 'X', 'pid': pid,
                    'tid': rows.index(r), 'dur': 1e6 * (b - a),
                    'ts': clock + 1e6 * (a - self._clock)}
                   for n, r, a, b, k in self._workers]
        with open(path, 'w') as f:
            json.dump(trace, f)
        return path
