"""Timelines: a block with two known operations gives both, on the devices
they ran on, in order; the chart and the Chrome trace can be made."""
import json

import numpy as np

from conftest import get_backend


def two_operations(backend, tl, x):
    """A product, then a copy of its result, on the first stand-in."""
    y = tl.watch(x @ x, 'product')
    tl.watch(backend.copy_to_cpu(y), 'copy', 'copy')


def _two_operations_recorded(backend):
    x = backend.array(np.ones((200, 200), np.float32))
    with backend.Timeline() as tl:
        two_operations(backend, tl, x)
    assert tl.events, 'nothing was recorded'
    return tl


def test_pytorch_records_the_operators_in_order():
    """PyTorch's profiler names the operators, on the one CPU row."""
    tl = _two_operations_recorded(get_backend('torch'))
    names = [e.name for e in tl.events]
    assert 'aten::matmul' in names or 'aten::mm' in names, names
    first = min(i for i, n in enumerate(names)
                if n in ('aten::matmul', 'aten::mm'))
    copy = names.index('aten::to')
    assert first < copy
    assert tl.events[copy].kind == 'copy'
    assert {tl.events[first].row, tl.events[copy].row} == {'CPU'}


def test_mxnet_records_the_watched_results_in_order():
    """MXNet's timeline names what was watched, on its context's row."""
    tl = _two_operations_recorded(get_backend('mxnet'))
    assert [e.name for e in tl.events] == ['product', 'copy']
    assert [e.row for e in tl.events] == ['cpu(0)', 'cpu(0)']
    assert [e.kind for e in tl.events] == ['compute', 'copy']


def test_mxnet_engine_notes_on_a_build_with_the_profiler(monkeypatch):
    """Lesson 3 asks for the engine's notes (engine_notes): on a build
    with its profiler, which records operators and not the watched
    results, the timeline still has the notes, and a sum queued after a
    barrier ends after the work before it."""
    backend = get_backend('mxnet')
    import mxnet as mx
    features = mx.runtime.Features()
    monkeypatch.setattr(type(features), 'is_enabled',
                        lambda self, name: name == 'PROFILER')
    monkeypatch.setattr(mx.runtime, 'Features', lambda: features)
    x = backend.array(np.ones((200, 200), np.float32))
    tl = backend.Timeline()
    tl.engine_notes = True
    with tl:
        y = tl.watch(x @ x, 'product')
        backend.synchronize([backend.try_devices(1)[0]])
        tl.watch(y + 1, 'sum', 'communication')
    assert [(e.name, e.kind) for e in tl.events] == [
        ('product', 'compute'), ('sum', 'communication')]
    assert tl.events[1].end >= tl.events[0].end


def test_timeline_holds_both_operations_in_order(backend, tmp_path):
    tl = _two_operations_recorded(backend)
    starts = [e.start for e in tl.events]
    assert starts == sorted(starts)
    assert all(0 <= e.start <= e.end for e in tl.events)
    trace = json.loads(open(tl.save(tmp_path / 'trace.json')).read())
    traced = {e.get('name') for e in trace['traceEvents']}
    assert {e.name for e in tl.events} <= traced
    ax = tl.plot('test')
    assert ax.get_title() == 'test'
    bars = sum(len(c.get_paths()) for c in ax.collections)
    assert bars == len(tl.events)  # a bar per event


def _products_on_two_devices(backend):
    devices = backend.try_devices(2)
    xs = [backend.array(np.ones((100, 100), np.float32), d) for d in devices]
    with backend.Timeline() as tl:
        for i, x in enumerate(xs):
            tl.watch(x @ x, f'on {i}')
    return tl


def test_mxnet_timeline_has_a_row_per_context():
    """One row per context, watched in order."""
    tl = _products_on_two_devices(get_backend('mxnet'))
    assert tl.rows() == ['cpu(0)', 'cpu(1)']
    assert {e.name: e.row for e in tl.events} == {'on 0': 'cpu(0)',
                                                   'on 1': 'cpu(1)'}


def test_pytorch_profiler_sees_one_cpu_thread_doing_both():
    tl = _products_on_two_devices(get_backend('torch'))
    assert tl.rows() == ['CPU']
    assert len([e for e in tl.events if e.name in
                ('aten::matmul', 'aten::mm')]) == 2


def test_train_step_timeline_shows_every_stage(backend):
    backend.seed(0)
    devices = backend.try_devices(2)
    train_iter, _ = backend.load_data_fashion_mnist(32, 64, 32)
    X, y = next(iter(train_iter))
    params = [backend.get_params(backend.lenet_params(), d)
              for d in devices]
    tl = backend.train_step_timeline(X, y, params, devices=devices, lr=0.1)
    names = {e.name for e in tl.events}
    assert {'split', 'forward_backward', 'allreduce', 'update'} <= names
    # Each stand-in's forward and backward pass is on a row of its own
    rows = {e.row for e in tl.events if e.name == 'forward_backward'}
    assert rows == {str(d) for d in devices}
    kinds = {e.name: e.kind for e in tl.events}
    assert kinds['allreduce'] == kinds['split'] == 'copy'


def test_train_step_timeline_makes_the_same_update_as_train_batch(backend):
    backend.seed(0)
    devices = backend.try_devices(2)
    train_iter, _ = backend.load_data_fashion_mnist(32, 64, 32)
    X, y = next(iter(train_iter))
    params = backend.lenet_params()
    stepped = [backend.get_params(params, d) for d in devices]
    timed = [backend.get_params(params, d) for d in devices]
    backend.train_batch(X, y, stepped, devices=devices, lr=0.1)
    backend.train_step_timeline(X, y, timed, devices=devices, lr=0.1)
    for a, b in zip(stepped, timed):
        for p, q in zip(a, b):
            np.testing.assert_array_equal(backend.numpy(p),
                                          backend.numpy(q))


def test_a_row_with_compute_and_copies_draws_them_in_lanes():
    """On a GPU, the profiler puts the kernels and the copies of all its
    streams on one row: a copy on the side stream that overlaps a product
    must be drawn beside it, not over it (events made by hand: the
    drawing only)."""
    from d2lpar import timeline
    tl = timeline.Timeline()
    tl.events = [timeline.Event('mm', 'cuda:0', 0.0, 1.0),
                 timeline.Event('Memcpy DtoH', 'cuda:0', 0.2, 0.6, 'copy'),
                 timeline.Event('mm', 'cuda:1', 0.0, 1.0)]
    ax = tl.plot()
    ys = {}  # the vertical extent of the bars of each colour and row
    for bars in ax.collections:
        for path in bars.get_paths():
            lo, hi = path.vertices[:, 1].min(), path.vertices[:, 1].max()
            ys.setdefault(round((lo + hi) / 2), []).append((lo, hi))
    compute, copy = sorted(ys[0])  # row 0, cuda:0: two lanes, apart
    assert compute[1] <= copy[0] and copy[1] - copy[0] > 0.3
    (alone,) = ys[1]  # row 1, cuda:1: only compute, the full height
    assert alone[1] - alone[0] > 0.6
