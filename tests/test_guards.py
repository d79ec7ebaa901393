"""Behaviours that users rely on and that no other test guarded (issue 35):
files written atomically, `synchronize` waiting for the copy queue too,
each kind of work in its lane on a timeline, what copy bandwidth counts,
and the published checksums of Fashion-MNIST.

Nothing here reads a clock for a verdict: queues are observed with events,
the bandwidth with a patched clock, so the tests hold on any CPU.
"""
import json
import pathlib
import threading
import types

import numpy as np
import pytest

import d2lpar
from d2lpar import data, timing
from d2lpar.distributed import scripts

WAIT = 30  # seconds; work that never runs fails the test, not CI


# --------------------------------------------------------------------------
# Results and checkpoints are written atomically
# --------------------------------------------------------------------------
class Planted(OSError):
    """The disk filling up in the middle of a write."""


def _fail_halfway(payload, f):
    """Write the first half of `payload` to the open file `f`, then fail."""
    f.write(payload[:len(payload) // 2])
    f.flush()
    raise Planted('disk full halfway through the file (planted)')


def _json_fails_halfway(monkeypatch):
    monkeypatch.setattr(json, 'dump', lambda obj, f, **kwargs: _fail_halfway(
        json.dumps(obj, **kwargs), f))


def test_results_survive_a_write_that_fails_halfway(tmp_path, monkeypatch):
    """A run that dies while writing result.json (or rank0.json, or MXNet's
    checkpoint.json: all go through write_json) leaves the previous file
    whole and readable, never half a JSON document."""
    path = str(tmp_path / 'result.json')
    scripts.write_json(path, {'run': 1})
    _json_fails_halfway(monkeypatch)
    with pytest.raises(Planted):
        scripts.write_json(path, {'run': 2, 'losses': list(range(100))})
    assert json.loads(pathlib.Path(path).read_text()) == {'run': 1}


def test_first_step_parameters_survive_a_write_that_fails_halfway(
        tmp_path, monkeypatch):
    """params_step1.npz, which the tests of lesson 4 compare between runs,
    is the previous whole file after a write that failed halfway."""
    import io
    path = str(tmp_path / 'params_step1.npz')
    scripts.write_npz(path, {'w': np.arange(3.0)})
    real = np.savez

    def savez(f, **arrays):
        buffer = io.BytesIO()
        real(buffer, **arrays)
        _fail_halfway(buffer.getvalue(), f)
    monkeypatch.setattr(np, 'savez', savez)
    with pytest.raises(Planted):
        scripts.write_npz(path, {'w': np.ones(1000)})
    with np.load(path) as saved:
        np.testing.assert_array_equal(saved['w'], np.arange(3.0))


def test_pytorch_checkpoint_survives_a_write_that_fails_halfway(
        tmp_path, monkeypatch):
    """ddp_train's checkpoint.pt: a crash while saving epoch 2 leaves the
    checkpoint of epoch 1, which a restart can load."""
    import io

    import torch
    from d2lpar.distributed import ddp_practices
    path = str(tmp_path / 'checkpoint.pt')
    ddp_practices.save_checkpoint(path, {'epoch': 1, 'w': torch.zeros(3)})
    real = torch.save

    def save(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real(obj, buffer, *args, **kwargs)
        _fail_halfway(buffer.getvalue(), f)
    monkeypatch.setattr(torch, 'save', save)
    with pytest.raises(Planted):
        ddp_practices.save_checkpoint(path, {'epoch': 2, 'w': torch.ones(99)})
    state = torch.load(path)
    assert state['epoch'] == 1 and state['w'].tolist() == [0, 0, 0]


class _Net:
    """Stands for a Gluon network: only what save_checkpoint calls."""

    def __init__(self, text):
        self.text = text

    def save_parameters(self, path):
        pathlib.Path(path).write_text(self.text)


def test_mxnet_checkpoint_survives_a_write_that_fails_halfway(
        tmp_path, monkeypatch):
    """kvstore_train's checkpoint: a crash while saving epoch 2 leaves
    checkpoint.json of epoch 1, and the parameter file it names."""
    kvstore_practices = pytest.importorskip(
        'd2lpar.distributed.kvstore_practices')
    folder = str(tmp_path)
    kvstore_practices.save_checkpoint(folder, _Net('epoch 1'), {
        'epoch': 1, 'step': 10, 'data_order': 'fixed'})
    _json_fails_halfway(monkeypatch)
    with pytest.raises(Planted):
        kvstore_practices.save_checkpoint(folder, _Net('epoch 2'), {
            'epoch': 2, 'step': 20, 'data_order': 'fixed'})
    state = json.loads((tmp_path / 'checkpoint.json').read_text())
    assert state['epoch'] == 1
    assert (tmp_path / state['params']).read_text() == 'epoch 1'


def test_server_summary_survives_a_write_that_fails_halfway(
        tmp_path, monkeypatch):
    """What an MXNet server writes about the state it holds
    (serverN.json) is the previous whole file after a failed write."""
    kvstore_state = pytest.importorskip('d2lpar.distributed.kvstore_state')
    from mxnet import np as mnp
    monkeypatch.setenv('DMLC_ROLE', 'server')
    monkeypatch.setenv('D2LPAR_SERVER', '0')
    optimizer = kvstore_state.SGD(momentum=0.9)
    optimizer.out_dir = str(tmp_path)
    optimizer.create_state(0, mnp.zeros(3))
    path = tmp_path / 'server0.json'
    before = json.loads(path.read_text())
    _json_fails_halfway(monkeypatch)
    with pytest.raises(Planted):
        optimizer.create_state(1, mnp.zeros(5))
    assert json.loads(path.read_text()) == before


@pytest.mark.parametrize('script', ['ddp_train', 'kvstore_train',
                                    'pipeline_train'])
def test_training_scripts_write_only_through_the_atomic_writers(script):
    """Every file a training script writes goes through write_json,
    write_npz or save_checkpoint (tested above): none is written in
    place by the script itself."""
    source = (pathlib.Path(d2lpar.__file__).parent / 'distributed'
              / f'{script}.py').read_text()
    for direct in ('savez(', 'json.dump(', 'torch.save(', '.save_parameters(',
                   "'w')", "'wb')", 'write_text('):
        assert direct not in source, f'{script}.py writes with {direct}'


# --------------------------------------------------------------------------
# synchronize and Benchmark wait for the copy queue too
# --------------------------------------------------------------------------
def _slow_copy():
    """A copy for a stand-in's copy queue that finishes a moment after it
    starts (released by a timer, not by this test's thread), and the list
    it marks when done."""
    finished, release = [], threading.Event()

    def copy():
        assert release.wait(WAIT)
        finished.append(True)
    threading.Timer(0.3, release.set).start()
    return copy, finished


@pytest.mark.parametrize('which', ['this device', 'all devices'])
def test_synchronize_waits_for_the_copy_queue(which):
    """After synchronize, a copy queued on a stand-in's copy queue has
    finished: the lesson reads the copied buffers right after it."""
    import torch

    import d2lpar.torch as d2l
    device = torch.device('cpu', 0)  # a CPU stand-in
    copy, finished = _slow_copy()
    d2l.launch(device, copy, queue='copy')
    d2l.synchronize([device] if which == 'this device' else None)
    assert finished, 'synchronize returned before the copy was done'


def test_benchmark_waits_for_the_copy_queue(monkeypatch):
    """A Benchmark block stops its clock only after the copies queued in
    it are done (else 'Copy to CPU' would time the queueing)."""
    import torch

    import d2lpar.torch as d2l
    monkeypatch.setattr(timing.Benchmark, 'records', [])
    device = torch.device('cpu', 0)
    copy, finished = _slow_copy()
    with d2l.Benchmark('copy', [device]):
        d2l.launch(device, copy, queue='copy')
    assert finished, 'the Benchmark stopped before the copy was done'


# --------------------------------------------------------------------------
# The timeline puts each kind of work in its lane
# --------------------------------------------------------------------------
def test_timeline_draws_and_exports_copies_in_the_copy_lane(tmp_path):
    """Work launched on a stand-in's copy queue is drawn (orange) and
    exported (its own thread, category 'copy') in the copy lane, compute
    in the compute lane: the lesson's picture of overlap depends on it."""
    import torch
    from matplotlib.colors import to_hex

    import d2lpar.torch as d2l
    device = torch.device('cpu', 0)
    x, y = torch.ones(100, 100), torch.empty(100, 100)

    def product(a):
        return a @ a

    def copy_into(a, b):
        b.copy_(a)

    with d2l.Timeline() as tl:
        d2l.launch(device, copy_into, d2l.launch(device, product, x), y,
                   queue='copy')
    expected = {'product': ('cpu:0', 'compute'),
                'copy_into': ('cpu:0 copy', 'copy')}
    assert {e.name: (e.row, e.kind) for e in tl.events
            if e.name in expected} == expected

    rows = tl.rows()
    ax = tl.plot()
    drawn = {}  # row: the colours of its bars
    for bars in ax.collections:
        for path in bars.get_paths():
            row = rows[round(path.vertices[:, 1].mean())]
            drawn.setdefault(row, set()).add(to_hex(bars.get_facecolor()[0]))
    # The lesson's words: "compute in blue and copies in orange"
    assert drawn == {'cpu:0': {to_hex('tab:blue')},
                     'cpu:0 copy': {to_hex('tab:orange')}}

    trace = json.loads(pathlib.Path(tl.save(tmp_path / 't.json')).read_text())
    threads = {(e['pid'], e['tid']): e['args']['name']
               for e in trace['traceEvents']
               if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    exported = {e['name']: (threads.get((e['pid'], e['tid'])), e.get('cat'))
                for e in trace['traceEvents'] if e.get('name') in expected}
    assert exported == expected


# --------------------------------------------------------------------------
# Copy bandwidth counts bytes read plus written
# --------------------------------------------------------------------------
def test_copy_bandwidth_counts_bytes_read_plus_written(backend, monkeypatch):
    """copy_bandwidth is bytes read plus written per second (its docstring;
    lesson 2 draws the floor of an allreduce, 2kN bytes, with it). With a
    clock that advances 1 ms per copy, that is (bytes of the source + bytes
    of the destination) / 1 ms, counted here from the arrays copied."""
    framework = backend.module.BACKEND
    now, moved = [0.0], []
    real = framework.copy_into

    def copy_into(src, dst):
        real(src, dst)
        moved.append(backend.numpy(src).nbytes + backend.numpy(dst).nbytes)
        now[0] += 1e-3
    monkeypatch.setattr(framework, 'copy_into', copy_into)
    monkeypatch.setattr(timing, 'time',
                        types.SimpleNamespace(perf_counter=lambda: now[0]))
    rate = backend.copy_bandwidth(backend.cpu(), num_bytes=4096)
    assert set(moved) == {2 * 4096}  # read 4096 bytes, wrote 4096 bytes
    assert rate == pytest.approx(2 * 4096 / 1e-3, rel=1e-6)


# --------------------------------------------------------------------------
# The data files are the real ones
# --------------------------------------------------------------------------
# As Zalando publishes them (github.com/zalandoresearch/fashion-mnist,
# README, "Get the Data"): name, split, content, MD5. The README rounds the
# sizes (26 MBytes, 29 KBytes, 4.3 MBytes, 5.1 KBytes); the byte counts are
# those of the files served at FASHION_MNIST_URL.
PUBLISHED = [
    ('train-images-idx3-ubyte.gz', 'train', 'images', 26421880,
     '8d4fb7e6c68d591d4c3dfef9ec88bf0d'),
    ('train-labels-idx1-ubyte.gz', 'train', 'labels', 29515,
     '25c81989df183df01b3e8a0aad5dffbe'),
    ('t10k-images-idx3-ubyte.gz', 'test', 'images', 4422102,
     'bef4ecab320f06d8554ea6380940ec79'),
    ('t10k-labels-idx1-ubyte.gz', 'test', 'labels', 5148,
     'bb300cfdad3c16e7a12a480ee83cd310'),
]


def test_fashion_mnist_checksums_are_the_published_ones():
    """Each file d2lpar downloads is checked against the MD5 that Zalando
    publishes for it, in its split and role (fetch_fashion_mnist reads the
    images first, then the labels): a swapped checksum would refuse every
    download, and the lessons would train on the stand-in instead."""
    listed = {(split, ('images', 'labels')[i]): entry
              for split, entries in data.FASHION_MNIST_FILES.items()
              for i, entry in enumerate(entries)}
    published = {(split, role): (name, md5)
                 for name, split, role, _size, md5 in PUBLISHED}
    assert listed == published

