"""Benchmarks of d2lpar: allreduce, training throughput, and lesson times.

Usage::

    .venv/bin/python tools/bench.py                  # full run (make bench)
    .venv/bin/python tools/bench.py --quick          # smoke run: fewer sizes,
                                                     # repeats and examples
    .venv/bin/python tools/bench.py --skip-notebooks # sections 1 and 2 only
    .venv/bin/python tools/bench.py --languages all  # time the notebooks of
                                                     # every language (slow)
    .venv/bin/python tools/bench.py --budget 900     # allow 15 minutes

``make bench`` must end within 10 minutes on 2 cores: a notebook that would
end after ``--budget`` seconds (570 by default) is skipped and reported as
not run. On an idle 2-core machine the full run takes about 6 minutes.

It prints markdown tables and writes them to ``build/bench/results.md``,
with every raw number in ``build/bench/results.json``. Every figure that
matters is a ratio of two numbers measured in the same run on the same
machine, so the tables can be compared between machines, not the seconds.

Sections:

1. Allreduce: ``d2l.allreduce``, ``d2l.ring_allreduce`` and
   ``d2l.direct_allreduce`` of both backends (``d2l.measure_allreduce`` on ``d2l.try_devices(k)``) and
   ``torch.distributed.all_reduce`` over gloo (k processes on 127.0.0.1),
   as a fraction of the one-host limit 2kN / memory-copy bandwidth on CPU
   stand-ins (on GPUs: the ring of the cost model on the link between them).
2. Training throughput: ``d2l.train`` on 1 and 2 devices against the
   chapter's own loop (per-batch synchronisation, the book's
   ``evaluate_accuracy_gpu``), with PyTorch DDP (2 gloo processes) and
   MXNet Gluon (kvstore 'device') as peers, and MXNET_CPU_TEMP_COPY=4
   against 16.
3. Lessons: wall time of each notebook under nbclient; by default those
   in English only, the other languages being estimated from them when
   their code cells are the same (``--languages all`` runs every one).

Each framework runs in its own subprocess (this file, called with the
hidden ``--worker`` option), so PyTorch and MXNet never share a process,
and a worker that hangs is killed after a timeout. The benchmark never
fails the build: it exits 0 unless this script itself crashes.
"""
import argparse
import ast
import datetime
import glob
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, 'build', 'bench')
LOG_DIR = os.path.join(OUT_DIR, 'logs')
DATA_DIR = os.environ.get('D2LPAR_DATA') or os.path.join(ROOT, 'data')
CORES = os.cpu_count() or 1
KB, MB = 1 << 10, 1 << 20

# Section 1
SIZES_FULL = [4 * KB, 64 * KB, 1 * MB, 16 * MB, 64 * MB]
SIZES_QUICK = [4 * KB, 1 * MB, 64 * MB]
COUNTS_FULL, COUNTS_QUICK = [2, 3, 4], [2, 4]
REPEAT_FULL, REPEAT_QUICK = 5, 2  # best of; 16 MB and more: at most 3
LARGE = 16 * MB
# Section 2: one global batch, learning rate and data for every loop
# Many short runs, best kept: a burst of other work on the machine spoils
# one run, not the figure.
TRAIN_FULL = dict(batch_size=256, lr=0.2, num_train=2048, num_test=1024,
                  num_epochs=1, reps=4)
TRAIN_QUICK = dict(batch_size=256, lr=0.2, num_train=1024, num_test=512,
                   num_epochs=1, reps=1)
# Section 3
NOTEBOOK_CELL_TIMEOUT = 300  # as the Makefile gives nbval

TARGET_FRACTION = 0.5        # of the one-host limit, 64 MB, 4 devices
TARGET_SCALING = 1.5         # 2 stand-ins / 1 stand-in, d2l.train
TARGET_BOTH = 0.65           # lesson 1: both stand-ins / sum of each
TARGET_COPY = 0.85           # lesson 1: compute and copy / sum
TARGET_CONCISE = 1.3         # lesson 3: 2 stand-ins / 1
TARGET_NOTEBOOK_S = 90
TARGET_NBVAL_S = 15 * 60


LOAD_TRACE = []  # (what just finished, 1-min load average), for the JSON


def log(message):
    """Progress goes to stderr; stdout carries the markdown only."""
    LOAD_TRACE.append((message, os.getloadavg()[0]))
    print(f'[bench {time.strftime("%H:%M:%S")}] {message}', file=sys.stderr,
          flush=True)


# ==========================================================================
# Running workers: subprocesses that cannot hang the benchmark
# ==========================================================================
def worker_env(extra=None):
    """Environment of a framework worker: the Makefile's data folder, the
    offline stand-in unless Fashion-MNIST is cached, no plot windows."""
    env = dict(os.environ)
    env['D2LPAR_DATA'] = DATA_DIR
    env.setdefault('MPLBACKEND', 'Agg')
    env.setdefault('KINETO_LOG_LEVEL', '5')
    if not real_data_cached():
        env['D2LPAR_OFFLINE'] = '1'
    env['PYTHONPATH'] = os.pathsep.join(
        [ROOT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
    env.update(extra or {})
    return env


def real_data_cached():
    raw = os.path.join(DATA_DIR, 'FashionMNIST', 'raw')
    names = ['train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz',
             't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz']
    return all(os.path.exists(os.path.join(raw, n)) for n in names)


def kill_group(proc):
    """Kill the process group of `proc`, a child started in its own
    session by this script (so the group holds only its processes)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def start_worker(name, spec, log_name, env_extra=None):
    """Start ``bench.py --worker name`` in its own session; returns
    (process, path of its JSON result, log file)."""
    os.makedirs(LOG_DIR, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix=f'{log_name}-', suffix='.json',
                               dir=OUT_DIR)
    os.close(fd)
    logf = open(os.path.join(LOG_DIR, f'{log_name}.log'), 'w')
    cmd = [sys.executable, os.path.abspath(__file__), '--worker', name,
           '--spec', json.dumps(spec), '--out', out]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(env_extra),
                            stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, out, logf


def collect(proc, out, logf, timeout):
    """Wait for a worker; its result dict, or {'error': ...}."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        rc = f'killed after {timeout} s'
    finally:
        kill_group(proc)  # anything the worker left behind in its group
        logf.close()
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = None
    finally:
        if os.path.exists(out):
            os.remove(out)
    if rc != 0 or result is None:
        return {'error': f'worker exited with {rc}; see {logf.name}'}
    return result


def run_worker(name, spec, timeout, log_name=None, env_extra=None):
    """Run one worker to the end (or its timeout) and return its result."""
    log_name = log_name or name
    start = time.perf_counter()
    proc, out, logf = start_worker(name, spec, log_name, env_extra)
    result = collect(proc, out, logf, timeout)
    log(f'{log_name}: {time.perf_counter() - start:.1f} s'
        + (f' ({result["error"]})' if 'error' in result else ''))
    return result


def free_port():
    """A free TCP port on the loopback interface (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run_ranks(name, world, spec, timeout, log_name):
    """Run `world` gloo ranks of worker `name` on 127.0.0.1; rank 0's
    result. All ranks are killed if one fails or the time runs out; gloo
    itself gives up on a collective after spec['pg_timeout'] seconds."""
    start = time.perf_counter()
    spec = dict(spec, world=world, port=free_port(),
                pg_timeout=max(30, timeout // 2))
    threads = str(max(1, CORES // world))  # as torchrun does
    env = {'OMP_NUM_THREADS': threads, 'MKL_NUM_THREADS': threads,
           'GLOO_SOCKET_IFNAME': 'lo'}
    procs, results, reason = [], [], None
    try:
        for rank in range(world):
            procs.append(start_worker(name, dict(spec, rank=rank),
                                      f'{log_name}-rank{rank}', env))
        deadline, reason = time.monotonic() + timeout, None
        while any(p.poll() is None for p, _, _ in procs):
            failed = [(rank, p.returncode) for rank, (p, _, _)
                      in enumerate(procs) if p.poll() not in (None, 0)]
            if failed:  # the others would wait for it until their timeout
                reason = (f'rank {failed[0][0]} exited with {failed[0][1]}, '
                          f'the other ranks were killed')
                break
            if time.monotonic() > deadline:
                reason = f'ranks still running after {timeout} s were killed'
                break
            time.sleep(0.1)
        for p, _, _ in procs:
            kill_group(p)  # nothing left to do for the ranks that ended
        results = [collect(p, o, f, timeout=1) for p, o, f in procs]
    finally:
        for p, _, f in procs:
            kill_group(p)
            f.close()
    errors = [r['error'] for r in results if 'error' in r]
    if reason:
        result = {'error': f'{reason}; see {os.path.relpath(LOG_DIR, ROOT)}'
                           f'/{log_name}-rank*.log'}
    else:
        result = {'error': errors[0]} if errors else results[0]
    log(f'{log_name}: {time.perf_counter() - start:.1f} s'
        + (f' ({result["error"]})' if 'error' in result else ''))
    return result


# ==========================================================================
# Workers (each runs in its own process)
# ==========================================================================
def import_backend(name):
    import importlib
    return importlib.import_module(f'd2lpar.{name}')


def repeat_for(nbytes, repeat):
    """Fewer repeats for large messages: they are slow and steady."""
    return min(repeat, 3) if nbytes >= LARGE else repeat


def best_copy_bandwidth(d2l, tries=3):
    return max(d2l.copy_bandwidth() for _ in range(tries))


def worker_allreduce(spec):
    """d2lpar's two allreduces of one backend, on d2l.try_devices(k)."""
    d2l = import_backend(spec['backend'])
    bw_start = best_copy_bandwidth(d2l)
    rows = []
    for k in spec['counts']:
        for nbytes in spec['sizes']:
            rows += d2l.measure_allreduce(
                [d2l.allreduce, d2l.ring_allreduce, d2l.direct_allreduce],
                [nbytes // 4], [k],
                repeat_for(nbytes, spec['repeat']))
    bw_end = best_copy_bandwidth(d2l)
    # On GPUs the limit is the link between them, not memory: the ring of
    # the cost model on the link nvidia-smi reports (none if unknown)
    link = d2l.gpu_link()
    for r in rows:
        r['link_floor'] = (d2l.allreduce_time(r['bytes'], r['devices'], link)
                           if r['on'] == 'gpu' and link else None)
    return {'rows': rows, 'copy_bandwidth': [bw_start, bw_end],
            'gpu_link': link}


def init_gloo(spec):
    import datetime as dt
    import torch.distributed as dist
    dist.init_process_group(
        'gloo', init_method=f'tcp://127.0.0.1:{spec["port"]}',
        rank=spec['rank'], world_size=spec['world'],
        timeout=dt.timedelta(seconds=spec['pg_timeout']))
    return dist


def worker_gloo_allreduce(spec):
    """One rank of max(counts): for each k, the first k ranks form a group
    and time best-of-N torch.distributed.all_reduce per size, with a
    barrier before each; a run's time is that of the slowest rank."""
    import torch
    dist = init_gloo(spec)
    rank, rows = spec['rank'], []
    try:
        for k in spec['counts']:
            group = dist.new_group(list(range(k)))  # called by every rank
            if rank < k:
                for nbytes in spec['sizes']:
                    rows.append(time_all_reduce(dist, group, k, nbytes,
                                                repeat_for(nbytes,
                                                           spec['repeat'])))
            dist.barrier()  # the other ranks wait here, idle
    finally:
        dist.destroy_process_group()
    return {'rows': rows}


def time_all_reduce(dist, group, k, nbytes, repeat):
    import torch
    x = torch.ones(nbytes // 4)
    dist.all_reduce(x, group=group)  # warm up (connections, buffers)
    best = float('inf')
    for _ in range(repeat):
        dist.barrier(group=group)
        start = time.perf_counter()
        dist.all_reduce(x, group=group)
        seconds = torch.tensor([time.perf_counter() - start],
                               dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
        best = min(best, seconds.item())
    return {'algorithm': 'all_reduce', 'devices': k, 'bytes': nbytes,
            'seconds': best, 'algbw': nbytes / best,
            'busbw': nbytes / best * 2 * (k - 1) / k}


def chapter_train(d2l, d2l_book, wait, num_gpus, batch_size, lr, num_epochs,
                  num_train, num_test, params):
    """The chapter's own training loop, written as the book writes it:
    wait for the devices after every minibatch (torch.cuda.synchronize()
    in the book) and evaluate with the book's evaluate_accuracy_gpu, which
    reads the accuracy of every batch. d2lpar's train_batch, get_params
    and lenet do the work; the data are d2lpar's, as for d2l.train."""
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        batch_size, num_train, num_test)
    devices = d2l.try_devices(num_gpus)
    device_params = [d2l.get_params(params, d) for d in devices]
    timer, acc, num_examples = d2l_book.Timer(), None, 0
    for epoch in range(num_epochs):
        timer.start()
        for X, y in train_iter:
            d2l.train_batch(X, y, device_params, devices, lr)
            wait(devices)
            num_examples += len(y)
        timer.stop()
        acc = d2l_book.evaluate_accuracy_gpu(
            lambda x: d2l.lenet(x, device_params[0]), test_iter, devices[0])
    print(f'test acc: {acc:.2f}, {timer.avg():.1f} sec/epoch on '
          f'{[str(d) for d in devices]}')
    return num_examples // num_epochs / timer.avg(), acc


def timed(fn, examples):
    """Run fn() -> (train examples/s, test acc); add end-to-end examples/s
    (training and evaluation, by the wall clock)."""
    start = time.perf_counter()
    train_eps, acc = fn()
    return {'train_eps': train_eps,
            'e2e_eps': examples / (time.perf_counter() - start),
            'test_acc': acc}


def interleaved(runs, reps):
    """Run each of `runs` ({label: fn}) `reps` times, in order, then in
    reverse order (ABBA), so that a drift in the machine's load hits every
    run alike; keep every measurement."""
    out = {label: [] for label in runs}
    labels = list(runs)
    for rep in range(reps):
        for label in labels if rep % 2 == 0 else labels[::-1]:
            out[label].append(runs[label]())
    return out


CONCISE = dict(width=8, batch_size=64, lr=0.1, num_train=1024, num_test=512,
               num_epochs=1)


def concise_runs(d2l, d2l_book, framework, cfg):
    """d2lpar's concise `train_concise` against the d2l package's
    `train_ch13`, on one device, with the same ResNet-18, data, batch and
    update (plain SGD; `train_ch13` backpropagates the sum of the losses
    in PyTorch, so its rate is divided by the batch size), neither drawing
    charts: end-to-end examples/s (training plus the test evaluation each
    epoch, by the wall clock), interleaved."""
    c = CONCISE
    examples = c['num_train'] // c['batch_size'] * c['batch_size'] \
        * c['num_epochs']
    device = [d2l.try_gpu()]  # the whole CPU, as train_ch13 uses it

    def ours():
        r = d2l.train_concise(d2l.resnet18(width=c['width']), device,
                              c['batch_size'], c['lr'], c['num_epochs'],
                              c['num_train'], c['num_test'], plot=False)
        return r.examples_per_sec, r.test_acc

    class NoChart:  # train_ch13 draws with d2l's Animator; ours does not
        def __init__(self, *args, **kwargs):
            pass

        def add(self, *args):
            pass


    def book():
        train_iter, test_iter = d2l.load_data_fashion_mnist(
            c['batch_size'], c['num_train'], c['num_test'])
        net = d2l.resnet18(width=c['width'])
        if framework == 'torch':
            import torch
            from torch import nn
            trainer = torch.optim.SGD(net.parameters(),
                                      lr=c['lr'] / c['batch_size'])
            loss = nn.CrossEntropyLoss(reduction='none')  # it sums them
            d2l_book.train_ch13(net, train_iter, test_iter, loss, trainer,
                                c['num_epochs'], device)
            net.eval()
        else:
            from mxnet import gluon
            net.collect_params().reset_ctx(device)
            net.hybridize()
            trainer = gluon.Trainer(net.collect_params(), 'sgd',
                                    {'learning_rate': c['lr']})
            loss = gluon.loss.SoftmaxCrossEntropyLoss()
            d2l_book.train_ch13(net, train_iter, test_iter, loss, trainer,
                                c['num_epochs'], device)
        acc = d2l.evaluate_accuracy(net, test_iter, device[0])
        return None, acc

    def wall(fn):
        def run():
            m = timed(fn, examples)
            m['train_eps'] = m['e2e_eps']  # the same clock for both
            return m
        return run

    ours()  # warm up (data cache, first-call costs)
    with mock.patch.object(d2l_book, 'Animator', NoChart):
        return interleaved({'train_concise': wall(ours),
                            'train_ch13': wall(book)}, cfg['reps'])


def train_runs(d2l, d2l_book, wait, cfg, extra=None):
    """The d2l.train and chapter-loop runs of one backend, warmed up."""
    c = {k: cfg[k] for k in ('batch_size', 'lr', 'num_train', 'num_test')}
    examples = cfg['num_train'] // cfg['batch_size'] * cfg['batch_size'] \
        * cfg['num_epochs']
    params = d2l.lenet_params()
    d2l.load_data_fashion_mnist(cfg['batch_size'], cfg['num_train'],
                                cfg['num_test'])  # cache the arrays
    for k in (1, 2):  # warm up both shapes of the minibatch shards
        d2l.train(k, cfg['batch_size'], cfg['lr'], num_epochs=1,
                  num_train=2 * cfg['batch_size'], num_test=cfg['batch_size'],
                  params=params, plot=False)

    def d2l_train(k):
        def run():
            r = d2l.train(k, num_epochs=cfg['num_epochs'], params=params,
                          plot=False, **c)
            return r.examples_per_sec, r.test_acc
        return lambda: timed(run, examples)

    def chapter(k):
        return lambda: timed(lambda: chapter_train(
            d2l, d2l_book, wait, k, num_epochs=cfg['num_epochs'],
            params=params, **c), examples)

    runs = {'d2l.train/1': d2l_train(1), 'd2l.train/2': d2l_train(2),
            'chapter/1': chapter(1), 'chapter/2': chapter(2)}
    for label, make in (extra or {}).items():
        runs[label] = make(params, examples)
    return interleaved(runs, cfg['reps'])


def worker_train_torch(spec):
    d2l = import_backend('torch')
    from d2l import torch as d2l_book
    import torch
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    c = {k: spec[k] for k in ('batch_size', 'lr', 'num_train', 'num_test',
                              'num_epochs')}

    def one_thread(k):
        def run(params):
            torch.set_num_threads(1)
            try:
                r = d2l.train(k, params=params, plot=False, **c)
            finally:
                torch.set_num_threads(threads)
            return r.examples_per_sec, r.test_acc
        return lambda params, examples: lambda: timed(
            lambda: run(params), examples)

    runs = train_runs(d2l, d2l_book, d2l.synchronize, spec, extra={
        'd2l.train-1t/1': one_thread(1), 'd2l.train-1t/2': one_thread(2)})
    return {'runs': runs, 'threads': threads,
            'concise': concise_runs(d2l, d2l_book, 'torch', spec)}


def worker_train_mxnet(spec):
    d2l = import_backend('mxnet')
    from d2l import mxnet as d2l_book
    from mxnet import npx
    npx.random.seed(0)
    small = dict(spec, num_train=2 * spec['batch_size'],
                 num_test=spec['batch_size'], num_epochs=1)
    for k in (1, 2):  # warm up Gluon (shapes, kvstore) before timing it
        gluon_train(d2l, k, d2l.lenet_params(), small)

    def gluon(k):
        return lambda params, examples: lambda: timed(
            lambda: gluon_train(d2l, k, params, spec), examples)

    runs = train_runs(d2l, d2l_book, lambda devices: npx.waitall(), spec,
                      extra={'gluon/1': gluon(1), 'gluon/2': gluon(2)})
    return {'runs': runs, 'temp_copy': os.environ.get('MXNET_CPU_TEMP_COPY'),
            'concise': concise_runs(d2l, d2l_book, 'mxnet', spec)}


def gluon_train(d2l, k, params, cfg):
    """MXNet Gluon peer: a gluon.nn LeNet of the same shape and initial
    values, gluon.Trainer with kvstore 'device', one wait per epoch."""
    from mxnet import autograd, gluon, npx
    from mxnet.gluon import nn
    net = nn.Sequential()
    net.add(nn.Conv2D(20, kernel_size=3, in_channels=1, activation='relu'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, in_channels=20, activation='relu'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, in_units=800, activation='relu'),
            nn.Dense(10, in_units=128))
    devices = d2l.try_devices(k)
    net.initialize(ctx=devices)
    values = [p.T if p.ndim == 2 else p for p in params]  # Dense: (out, in)
    for p, v in zip(net.collect_params().values(), values):
        assert p.shape == v.shape, (p.name, p.shape, v.shape)
        p.set_data(v)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': cfg['lr']}, kvstore='device')
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        cfg['batch_size'], cfg['num_train'], cfg['num_test'])
    timer, num_examples, acc = d2l.Timer(), 0, None
    for epoch in range(cfg['num_epochs']):
        timer.start()
        for X, y in train_iter:
            X_shards, y_shards = d2l.split_batch(X, y, devices)
            with autograd.record():
                ls = [loss(net(Xs), ys) for Xs, ys in zip(X_shards, y_shards)]
            for l in ls:
                l.backward()
            trainer.step(X.shape[0])
            num_examples += len(y)
        npx.waitall()
        timer.stop()
        acc = d2l.evaluate_accuracy(net, test_iter, devices[0])
    return num_examples // cfg['num_epochs'] / timer.avg(), acc


def worker_temp_copy(spec):
    """d2l.train (MXNet) on 2 devices under the MXNET_CPU_TEMP_COPY that
    the parent set before this process imported MXNet."""
    d2l = import_backend('mxnet')
    params = d2l.lenet_params()
    cfg = spec
    examples = cfg['num_train'] // cfg['batch_size'] * cfg['batch_size'] \
        * cfg['num_epochs']
    d2l.load_data_fashion_mnist(cfg['batch_size'], cfg['num_train'],
                                cfg['num_test'])
    d2l.train(2, cfg['batch_size'], cfg['lr'], num_epochs=1,
              num_train=2 * cfg['batch_size'], num_test=cfg['batch_size'],
              params=params, plot=False)

    def run():
        r = d2l.train(2, cfg['batch_size'], cfg['lr'],
                      num_epochs=cfg['num_epochs'], num_train=cfg['num_train'],
                      num_test=cfg['num_test'], params=params, plot=False)
        return r.examples_per_sec, r.test_acc

    runs = [timed(run, examples) for _ in range(cfg['reps'])]
    return {'runs': runs, 'temp_copy': os.environ.get('MXNET_CPU_TEMP_COPY')}


def torch_lenet_module(params):
    """d2lpar's LeNet as an nn.Module: the same layers, the same initial
    values (d2lpar keeps the fully connected weights as (in, out))."""
    import torch
    from torch import nn
    net = nn.Sequential(
        nn.Conv2d(1, 20, kernel_size=3), nn.ReLU(),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(),
        nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
        nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))
    with torch.no_grad():
        for p, v in zip(net.parameters(), params):
            p.copy_(v.T if v.ndim == 2 else v)
    return net


def worker_ddp(spec):
    """One rank of PyTorch DistributedDataParallel over gloo: every rank
    reads the same global minibatches and trains on its share."""
    d2l = import_backend('torch')
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    dist = init_gloo(spec)
    rank, world = spec['rank'], spec['world']
    try:
        params = d2l.lenet_params()
        net = torch_lenet_module(params)
        model = DDP(net)
        opt = torch.optim.SGD(model.parameters(), lr=spec['lr'])
        loss = nn.CrossEntropyLoss()  # mean over the shard; DDP averages

        def data():  # fresh iterators: the minibatches of d2l.train
            return d2l.load_data_fashion_mnist(
                spec['batch_size'], spec['num_train'], spec['num_test'])

        def step(X, y):
            X, y = X.tensor_split(world)[rank], y.tensor_split(world)[rank]
            opt.zero_grad(set_to_none=True)
            loss(model(X), y).backward()
            opt.step()

        for i, (X, y) in enumerate(data()[0]):  # warm up
            step(X, y)
            if i == 3:
                break
        runs = []
        for _ in range(spec['reps']):
            with torch.no_grad():  # start from the same values every time
                for p, v in zip(net.parameters(), params):
                    p.copy_(v.T if v.ndim == 2 else v)
            train_iter, test_iter = data()
            dist.barrier()
            start, seconds, examples, acc = time.perf_counter(), 0.0, 0, None
            for epoch in range(spec['num_epochs']):
                dist.barrier()
                t = time.perf_counter()
                for X, y in train_iter:
                    step(X, y)
                    examples += len(y)
                dist.barrier()
                seconds += time.perf_counter() - t
                if rank == 0:  # evaluate on the first rank, as d2l.train
                    acc = d2l.evaluate_accuracy(net, test_iter)
                dist.barrier()
            runs.append({'train_eps': examples / seconds,
                         'e2e_eps': examples / (time.perf_counter() - start),
                         'test_acc': acc})
    finally:
        dist.destroy_process_group()
    return {'runs': runs, 'threads': torch.get_num_threads()}


# --------------------------------------------------------------------------
# Section 0: CPU stand-ins (lessons 1 and 3 as a student runs them)
# --------------------------------------------------------------------------
STANDIN_REPS_FULL, STANDIN_REPS_QUICK = 5, 3
LESSON1_SIZE = 500  # lesson 1's sizes on a CPU
LESSON1_A, LESSON1_B = (1000, 16), (16, 1000)
CONCISE_STANDINS = dict(width=8, batch_size=64, lr=0.05, num_train=2048,
                        num_test=256, num_epochs=1)


def lesson1_ratios(d2l, fw, reps):
    """Lesson 1 on CPU stand-ins, with the lesson's own calls: (both
    devices at once) / (each alone, summed), and (compute and copy) /
    (compute + copy), each a median over `reps` rounds."""
    devices = d2l.try_devices(2)
    if fw == 'torch':
        import torch
        rand = lambda shape, d: torch.rand(size=shape, device=d)  # noqa
        empty = lambda shape, d: torch.empty(size=shape, device=d)  # noqa
        cpu = torch.device('cpu')

        def product(a, b, out):
            return torch.mm(a, b, out=out)

        def copy_to_cpu(y, y_cpu):
            for t, buffer in zip(y, y_cpu):
                buffer.copy_(t)
    else:
        from mxnet import np, npx
        rand = lambda shape, d: np.random.uniform(size=shape, ctx=d)  # noqa
        empty = lambda shape, d: np.empty(shape, ctx=d)  # noqa
        cpu = npx.cpu()

        def product(a, b, out):
            return np.dot(a, b, out=out)

        def copy_to_cpu(y, y_cpu):
            for t, buffer in zip(y, y_cpu):
                t.copyto(buffer)

    def run(x):
        return [product(x, x, None) for _ in range(50)]

    def products(a, b, y):
        for t in y:
            product(a, b, t)
        return y

    def seconds(fn):
        d2l.synchronize(devices)
        start = time.perf_counter()
        fn()
        d2l.synchronize(devices)
        return time.perf_counter() - start

    x1, x2 = (rand((LESSON1_SIZE, LESSON1_SIZE), d) for d in devices)
    a, b = rand(LESSON1_A, devices[0]), rand(LESSON1_B, devices[0])
    shape = (LESSON1_A[0], LESSON1_B[1])
    y = [empty(shape, devices[0]) for _ in range(50)]
    y_cpu = [empty(shape, cpu) for _ in range(50)]

    def compute_and_copy():
        for t, buffer in zip(y, y_cpu):
            done = d2l.launch(devices[0], products, a, b, [t])
            d2l.launch(devices[0], copy_to_cpu, done, [buffer], queue='copy')

    jobs = {'alone 1': lambda: d2l.launch(devices[0], run, x1),
            'alone 2': lambda: d2l.launch(devices[1], run, x2),
            'both': lambda: (d2l.launch(devices[0], run, x1),
                             d2l.launch(devices[1], run, x2)),
            'compute': lambda: d2l.launch(devices[0], products, a, b, y),
            'copy': lambda: d2l.launch(devices[0], copy_to_cpu, y, y_cpu,
                                       queue='copy'),
            'compute and copy': compute_and_copy}
    for _ in range(3):  # warm up, as the lesson does
        for job in jobs.values():
            seconds(job)
    times = {k: [] for k in jobs}
    for _ in range(reps):
        for k, job in jobs.items():
            times[k].append(seconds(job))
    both = [b / (a1 + a2) for b, a1, a2 in zip(
        times['both'], times['alone 1'], times['alone 2'])]
    overlap = [b / (a + c) for b, a, c in zip(
        times['compute and copy'], times['compute'], times['copy'])]
    floor = [max(a, c) / (a + c)
             for a, c in zip(times['compute'], times['copy'])]
    return {'times': times, 'both_over_sum': statistics.median(both),
            'copy_over_sum': statistics.median(overlap),
            'copy_floor': statistics.median(floor)}


def concise_scaling(d2l, fw, reps):
    """Lesson 3 on CPU stand-ins: `train_concise` on 2 stand-ins over 1,
    the training examples/s that the lesson reports, median of `reps`
    rounds (1, 2, 2, 1, ...); the 2-device run gets twice the batch."""
    c = CONCISE_STANDINS
    eps = {1: [], 2: []}

    def once(k):
        if fw == 'torch':  # the same network in every run
            import torch
            torch.manual_seed(0)
        net = d2l.resnet18(width=c['width'])
        r = d2l.train_concise(net, d2l.try_devices(k), k * c['batch_size'],
                              k * c['lr'], c['num_epochs'], c['num_train'],
                              c['num_test'], plot=False)
        eps[k].append(r.examples_per_sec)

    once(1)  # warm up
    eps[1].clear()
    for rep in range(reps):
        for k in (1, 2) if rep % 2 == 0 else (2, 1):
            once(k)
    return {'eps': eps, 'two_over_one': statistics.median(
        b / a for a, b in zip(eps[1], eps[2]))}


def worker_standins(spec):
    d2l = import_backend(spec['framework'])
    return {'lesson1': lesson1_ratios(d2l, spec['framework'], spec['reps']),
            'lesson3': concise_scaling(d2l, spec['framework'],
                                       spec['reps'])}


WORKERS = {'allreduce': worker_allreduce,
           'gloo_allreduce': worker_gloo_allreduce,
           'train_torch': worker_train_torch,
           'train_mxnet': worker_train_mxnet,
           'temp_copy': worker_temp_copy,
           'ddp': worker_ddp, 'standins': worker_standins}


def worker_main(name, spec, out):
    # Settle pyplot's backend now: d2l's Animator (in train_ch13) creates an
    # IPython shell, and matplotlib 3.7 then asks IPython 9 for a function
    # it no longer has when it picks a backend.
    import matplotlib.pyplot as plt
    plt.switch_backend('Agg')
    result = WORKERS[name](spec)
    if spec.get('rank', 0) == 0:
        with open(out, 'w') as f:
            json.dump(result, f)
    else:
        with open(out, 'w') as f:
            json.dump({'rank': spec['rank']}, f)


# ==========================================================================
# Formatting
# ==========================================================================
def md_table(headers, rows):
    lines = ['| ' + ' | '.join(headers) + ' |',
             '| ' + ' | '.join('---' for _ in headers) + ' |']
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def fmt_bytes(n):
    if n >= MB:
        return f'{n / MB:.3g} MB'
    return f'{n / KB:.3g} KB'


def fmt_sig(x, digits=3):
    return f'{x:.{digits}g}' if x < 10 ** digits else f'{x:.0f}'


def fmt_eps(x):
    return 'n/a' if x is None else f'{x:.0f}'


def fmt_ratio(x, digits=2):
    return '—' if x is None else f'{x:.{digits}f}x'


# ==========================================================================
# Section 1: allreduce
# ==========================================================================
ALGORITHMS = [  # (label, source, name in the rows, cost model)
    ('d2lpar.torch allreduce', 'torch', 'allreduce', 'naive'),
    ('d2lpar.torch ring_allreduce', 'torch', 'ring_allreduce', 'ring'),
    ('d2lpar.torch direct_allreduce', 'torch', 'direct_allreduce', 'direct'),
    ('d2lpar.mxnet allreduce', 'mxnet', 'allreduce', 'naive'),
    ('d2lpar.mxnet ring_allreduce', 'mxnet', 'ring_allreduce', 'ring'),
    ('d2lpar.mxnet direct_allreduce', 'mxnet', 'direct_allreduce', 'direct'),
    ('torch.distributed gloo all_reduce', 'gloo', 'all_reduce', 'gloo'),
]


def cost_model(model, k, n):
    """(bytes moved between devices in all, bytes on the busiest link)."""
    total = 2 * (k - 1) * n
    busiest = total if model == 'naive' else total / k
    return total, busiest


def section_standins(args):
    reps = STANDIN_REPS_QUICK if args.quick else STANDIN_REPS_FULL
    res = {}
    for fw in ('torch', 'mxnet'):
        res[fw] = run_worker('standins', {'framework': fw, 'reps': reps},
                             600, f'standins-{fw}')
    return res


def report_standins(res):
    out = ['## 0. CPU stand-ins', '',
           f'Two CPU stand-ins (`d2l.try_devices(2)`: each half of the '
           f'cores with its own worker) against one, with the calls of the '
           f'lessons themselves and the default thread settings; medians of '
           f'{STANDIN_REPS_QUICK}-{STANDIN_REPS_FULL} rounds. Lesson 1: 50 '
           f'products of {LESSON1_SIZE}x{LESSON1_SIZE} matrices per device; '
           f'compute and copy: 50 products of {LESSON1_A} by {LESSON1_B} '
           f'matrices, each followed by its copy on the copy queue. Lesson 3: '
           f'`train_concise`, ResNet-18 width {CONCISE_STANDINS["width"]}, '
           f'{CONCISE_STANDINS["num_train"]} examples, batch '
           f'{CONCISE_STANDINS["batch_size"]} per device. On one host the '
           f'limits are 0.50 for the first (both halves busy all the time), '
           f'the longer part over the sum of both for the second (in '
           f'brackets), and 2.00x for the last.', '']
    rows = []
    for fw in ('torch', 'mxnet'):
        r = res.get(fw) or {}
        if 'error' in r:
            rows.append([fw, 'no data', r['error'][:80], '—'])
            continue
        floor = r['lesson1'].get('copy_floor')
        rows.append([fw, f'{r["lesson1"]["both_over_sum"]:.2f}',
                     f'{r["lesson1"]["copy_over_sum"]:.2f}'
                     + (f' ({floor:.2f})' if floor else ''),
                     fmt_ratio(r['lesson3']['two_over_one'])])
    out.append(md_table(['backend', 'lesson 1: both / sum of each alone',
                         'lesson 1: compute and copy / sum',
                         'lesson 3: 2 stand-ins / 1 (examples/s)'], rows))
    return '\n'.join(out)


def section_allreduce(args):
    sizes = SIZES_QUICK if args.quick else SIZES_FULL
    counts = COUNTS_QUICK if args.quick else COUNTS_FULL
    repeat = REPEAT_QUICK if args.quick else REPEAT_FULL
    spec = {'sizes': sizes, 'counts': counts, 'repeat': repeat}
    timeout = 300
    raw = {}
    for backend in ('torch', 'mxnet'):
        raw[backend] = run_worker('allreduce', dict(spec, backend=backend),
                                  timeout, f'allreduce-{backend}')
    r = run_ranks('gloo_allreduce', max(counts), spec, timeout, 'gloo')
    gloo_rows = r.get('rows', [])
    gloo_errors = [r['error']] if 'error' in r else []
    raw['gloo'] = {'rows': gloo_rows, 'errors': gloo_errors}

    bandwidths = {b: raw[b].get('copy_bandwidth', []) for b in ('torch',
                                                                'mxnet')}
    all_bw = [x for v in bandwidths.values() for x in v]
    limit_bw = max(all_bw) if all_bw else None
    rows = []
    for label, source, name, model in ALGORITHMS:
        for r in raw[source].get('rows', []):
            if r['algorithm'] != name:
                continue
            k, n, t = r['devices'], r['bytes'], r['seconds']
            if r.get('on') == 'gpu':  # the link's ring model, see worker
                floor = r.get('link_floor')
            else:  # CPU stand-ins: one memory, 2kN bytes at its bandwidth
                floor = 2 * k * n / limit_bw if limit_bw else None
            total, busiest = cost_model(model, k, n)
            rows.append(dict(r, label=label, backend=source, model=model,
                             floor_seconds=floor,
                             fraction=floor / t if floor else None,
                             bytes_moved=total, busiest_link=busiest))
    errors = {s: raw[s]['error'] for s in ('torch', 'mxnet')
              if 'error' in raw[s]}
    if gloo_errors:
        errors['gloo'] = '; '.join(gloo_errors)
    return {'sizes': sizes, 'counts': counts, 'repeat': repeat,
            'copy_bandwidth': bandwidths, 'limit_bandwidth': limit_bw,
            'rows': rows, 'errors': errors}


def report_allreduce(res):
    out = ['## 1. Allreduce', '']
    bw = res['copy_bandwidth']
    parts = [f'{b}: ' + ', '.join(f'{x / 1e9:.1f}' for x in v) + ' GB/s'
             for b, v in bw.items() if v]
    if res['limit_bandwidth']:
        out.append(f'Memory-copy bandwidth, `d2l.copy_bandwidth()` (64 MB, '
                   f'bytes read + written per second, best of 3, at the '
                   f'start and the end of each backend\'s run): '
                   f'{"; ".join(parts)}. The one-host limit below uses the '
                   f'highest, {res["limit_bandwidth"] / 1e9:.1f} GB/s: k '
                   f'replicas of N bytes must at least be read and written '
                   f'once, so floor = 2kN / bandwidth and fraction = floor '
                   f'/ time. That is the limit of CPU stand-ins, which share '
                   f'one memory; on GPUs the limit is the link between them, '
                   f'and the floor is the ring of `d2l.allreduce_time` on '
                   f'the link `d2l.gpu_link()` reports.')
    out.append(f'Best of {res["repeat"]} after one warm-up; algbw = N / '
               f'time, busbw = algbw * 2(k-1)/k (nccl-tests). Devices are '
               f'`d2l.try_devices(k)` (CPU stand-ins here). gloo: '
               f'{max(res["counts"])} processes on 127.0.0.1, the first k '
               f'form the group (the others wait at a barrier); each run '
               f'follows a barrier and the slowest rank counts.')
    out.append('A fraction above 100% means that the data stayed in the CPU '
               'caches, which are faster than memory; the limit is for '
               'memory. MXNet\'s copies run at its own copy bandwidth (above);'
               ' its allreduce copies between contexts into fresh arrays, its '
               'ring reads the other stand-ins\' chunks in place (one memory) '
               'and copies only in the all-gather, but its steps run one '
               'after the other (MXNet orders operators by whole arrays, and '
               'each step writes an array the next one reads); '
               'direct_allreduce sums each chunk into a buffer of its own, so '
               'the stand-ins add and copy at the same time.')
    for backend, error in res['errors'].items():
        out.append(f'\n**{backend}: no data** ({error})')
    headers = ['algorithm', 'N', 'time (ms)', 'algbw (GB/s)',
               'busbw (GB/s)', 'floor (ms)', 'fraction of limit',
               'bytes moved (cost model)', 'busiest link (cost model)']
    for k in res['counts']:
        rows = []
        for n in res['sizes']:
            for r in res['rows']:
                if r['devices'] != k or r['bytes'] != n:
                    continue
                link = fmt_bytes(r['busiest_link'])
                if r['model'] == 'naive':
                    link += ' (device 0)'
                elif r['model'] == 'gloo':
                    link += ' (ring-like)'
                elif r['model'] == 'direct':
                    link += ' per device'
                else:
                    link += ' per link'
                rows.append([
                    r['label'], fmt_bytes(n), fmt_sig(1e3 * r['seconds']),
                    fmt_sig(r['algbw'] / 1e9), fmt_sig(r['busbw'] / 1e9),
                    fmt_sig(1e3 * r['floor_seconds'])
                    if r['floor_seconds'] else '—',
                    f'{r["fraction"]:.0%}' if r['fraction'] else '—',
                    fmt_bytes(r['bytes_moved']), link])
        out += ['', f'### {k} devices', '', md_table(headers, rows)]
    out += ['', 'Cost model: naive moves 2(k-1)N in all, all of it through '
            'device 0; the ring moves 2(k-1)N too, but only 2(k-1)N/k on '
            'each link; gloo is ring-like. On one host the ring moves as '
            'many bytes as the naive version, so it cannot win here; direct '
            'moves 2(k-1)N too, 2(k-1)N/k from each device (every device '
            'sums a chunk, then sends it to every other one); across '
            'devices with their own links, the naive version pushes 2(k-1)N '
            'through one device while the ring puts 2(k-1)/k·N on each '
            'link.']
    return '\n'.join(out)


def best_fraction(res, backend, k=4, n=64 * MB):
    """The best fraction of the one-host limit among `backend`'s rows at
    (k, n), the algorithm that reached it, and the same time as a fraction
    of the limit set by the backend's own copy bandwidth."""
    rows = [r for r in res['rows'] if r['backend'] == backend
            and r['devices'] == k and r['bytes'] == n and r['fraction']]
    if not rows:
        return None, None, None
    best = max(rows, key=lambda r: r['fraction'])
    own = res['copy_bandwidth'].get(backend)
    own_fraction = 2 * k * n / max(own) / best['seconds'] if own else None
    return best['fraction'], best['algorithm'], own_fraction


# ==========================================================================
# Section 2: training throughput
# ==========================================================================
def summarize(measurements, process):
    """Best of the repeated measurements, and their spread. `process`
    names the worker: runs of one worker were interleaved round by round,
    so their ratios can be taken round by round (see `ratio`)."""
    if not measurements:
        return None
    best = max(measurements, key=lambda m: m['train_eps'])
    eps = [m['train_eps'] for m in measurements]
    return dict(best, reps=measurements, process=process,
                spread=(max(eps) - min(eps)) / max(eps))


def section_training(args):
    cfg = dict(TRAIN_QUICK if args.quick else TRAIN_FULL)
    timeout = 200 if args.quick else 360
    res = {'config': cfg, 'errors': {}}
    torch_raw = run_worker('train_torch', cfg, timeout)
    ddp_raw = run_ranks('ddp', 2, cfg, timeout, 'ddp')
    mxnet_raw = run_worker('train_mxnet', cfg, timeout)
    # MXNET_CPU_TEMP_COPY is read when MXNet loads: one process per value,
    # alternating 4, 16, 4, 16 so that both see the machine alike.
    temp = {'4': {'runs': []}, '16': {'runs': []}}
    for i in range(1 if args.quick else 2):
        for value in ('4', '16'):
            r = run_worker('temp_copy', dict(cfg, reps=2), timeout,
                           f'temp-copy-{value}-{i}',
                           {'MXNET_CPU_TEMP_COPY': value})
            if 'error' in r:
                temp[value] = r
            elif 'runs' in temp[value]:
                temp[value]['runs'] += r['runs']
    for name, raw in (('torch', torch_raw), ('ddp', ddp_raw),
                      ('mxnet', mxnet_raw)):
        if 'error' in raw:
            res['errors'][name] = raw['error']
    runs = {}
    for backend, raw in (('torch', torch_raw), ('mxnet', mxnet_raw)):
        for label, ms in raw.get('runs', {}).items():
            runs[f'{backend}:{label}'] = summarize(ms, backend)
    if 'runs' in ddp_raw:
        runs['torch:ddp/2'] = summarize(ddp_raw['runs'], 'ddp')
    res['runs'] = runs
    res['raw'] = {'torch': torch_raw, 'ddp': ddp_raw, 'mxnet': mxnet_raw}
    res['temp_copy'] = {v: (summarize(r['runs'], f'temp_copy={v}')
                            if 'runs' in r else r)
                        for v, r in temp.items()}
    for backend, raw in (('torch', torch_raw), ('mxnet', mxnet_raw)):
        for label, ms in (raw.get('concise') or {}).items():
            runs[f'{backend}:{label}'] = summarize(ms, f'{backend} concise')
    return res


ROWS = [  # (backend, run, devices, loop, compared with)
    ('torch', 'chapter', 1, "chapter's loop", None),
    ('torch', 'd2l.train', 1, 'd2l.train', 'chapter/1'),
    ('torch', 'chapter', 2, "chapter's loop", None),
    ('torch', 'd2l.train', 2, 'd2l.train', 'chapter/2'),
    ('torch', 'd2l.train-1t', 1, 'd2l.train, 1 thread', 'd2l.train/1'),
    ('torch', 'd2l.train-1t', 2, 'd2l.train, 1 thread', 'd2l.train/2'),
    ('torch', 'ddp', 2, 'DDP, 2 gloo processes', 'd2l.train/2'),
    ('mxnet', 'chapter', 1, "chapter's loop", None),
    ('mxnet', 'd2l.train', 1, 'd2l.train', 'chapter/1'),
    ('mxnet', 'gluon', 1, 'Gluon, kvstore device', 'd2l.train/1'),
    ('mxnet', 'chapter', 2, "chapter's loop", None),
    ('mxnet', 'd2l.train', 2, 'd2l.train', 'chapter/2'),
    ('mxnet', 'gluon', 2, 'Gluon, kvstore device', 'd2l.train/2'),
]


def ref_label(ref):
    """'chapter/1' -> "chapter's loop, 1 dev"."""
    run, k = ref.split('/')
    name = "chapter's loop" if run == 'chapter' else run
    return f'{name}, {k} dev'


def ratio(runs, a, b, key='train_eps'):
    """Throughput of run `a` over run `b`. Runs of one process ran side by
    side, round after round: the median over the rounds of the ratio
    within a round, which a burst of other work on the machine spoils for
    one round only. Runs of different processes: best over best."""
    ra, rb = runs.get(a) or {}, runs.get(b) or {}
    if 'reps' not in ra or 'reps' not in rb:  # not measured, or an error
        return None
    if ra['process'] == rb['process'] and len(ra['reps']) == len(rb['reps']):
        return statistics.median(x[key] / y[key]
                                 for x, y in zip(ra['reps'], rb['reps']))
    return ra[key] / rb[key]


def report_training(res):
    cfg, runs = res['config'], res['runs']
    out = ['## 2. Training throughput', '',
           f'LeNet of the chapter, global batch {cfg["batch_size"]}, lr '
           f'{cfg["lr"]}, {cfg["num_train"]} training and {cfg["num_test"]} '
           f'test examples, {cfg["num_epochs"]} epoch(s) per run after a '
           f'warm-up; each run {cfg["reps"]} time(s), interleaved (ABBA), '
           f'best kept. *train* = examples per second of the training loop '
           f'(the chapter\'s timer, without evaluation); *end-to-end* adds '
           f'the evaluation after each epoch (wall clock). Ratios are of '
           f'*train* (of end-to-end in brackets); between runs of one '
           f'process, the median over the rounds of the ratio within a '
           f'round; between processes (DDP, MXNET_CPU_TEMP_COPY), best over '
           f'best.']
    for name, error in res['errors'].items():
        out.append(f'\n**{name}: no data** ({error})')
    rows = []
    for backend, run, k, loop, ref in ROWS:
        key = f'{backend}:{run}/{k}'
        r = runs.get(key)
        if r is None:
            continue
        ref_key = f'{backend}:{ref}' if ref else None
        rr = ratio(runs, key, ref_key) if ref else None
        re2e = ratio(runs, key, ref_key, 'e2e_eps') if ref else None
        rows.append([backend, loop, k, f'{r["train_eps"]:.0f}',
                     f'{r["e2e_eps"]:.0f}', f'{r["test_acc"]:.2f}'
                     if r['test_acc'] is not None else '—',
                     f'{r["spread"]:.0%}' if len(r['reps']) > 1 else '—',
                     ref_label(ref) if ref else 'baseline',
                     f'{fmt_ratio(rr)} ({fmt_ratio(re2e)})' if ref else '—'])
    out += ['', md_table(['backend', 'loop', 'devices', 'train ex/s',
                          'end-to-end ex/s', 'test acc', 'spread of reps',
                          'compared with', 'ratio'], rows)]
    out += ['', 'The chapter\'s loop is the book\'s `train` with d2lpar\'s '
            '`train_batch`, `get_params` and `lenet`: it waits after every '
            'minibatch (`d2l.synchronize(devices)` for PyTorch, a no-op on '
            'CPU; `npx.waitall()` for MXNet) and evaluates with '
            '`d2l.evaluate_accuracy_gpu` of the `d2l` package, which reads '
            'every batch\'s accuracy. DDP ranks run one thread each '
            '(OMP_NUM_THREADS = cores / ranks, as torchrun sets it); the '
            'other runs use the frameworks\' default threads, but *d2l.train, '
            '1 thread*, which calls `torch.set_num_threads(1)` first.']
    scaling = ['', '| backend | d2l.train 2 dev / 1 dev | chapter\'s loop '
               '2 / 1 | peer 2 / 1 |', '| --- | --- | --- | --- |']
    for backend, peer in (('torch', None), ('mxnet', 'gluon')):
        s = ratio(runs, f'{backend}:d2l.train/2', f'{backend}:d2l.train/1')
        c = ratio(runs, f'{backend}:chapter/2', f'{backend}:chapter/1')
        p = ratio(runs, f'{backend}:{peer}/2', f'{backend}:{peer}/1') \
            if peer else None
        scaling.append(f'| {backend} | {fmt_ratio(s)} | {fmt_ratio(c)} | '
                       + (f'Gluon {fmt_ratio(p)}' if peer else
                          'DDP 2 proc / d2l.train 1 dev '
                          + fmt_ratio(ratio(runs, 'torch:ddp/2',
                                            'torch:d2l.train/1'))) + ' |')
    out += scaling
    out += ['', '### Lesson 3: concise training', '',
            f'ResNet-18 (width {CONCISE["width"]}), {CONCISE["num_train"]} '
            f'training and {CONCISE["num_test"]} test examples, batch '
            f'{CONCISE["batch_size"]}, 1 device, end-to-end examples/s '
            f'(training and test evaluation, wall clock):', '']
    rows = []
    for backend in ('torch', 'mxnet'):
        ours = runs.get(f'{backend}:train_concise') or {}
        book = runs.get(f'{backend}:train_ch13') or {}
        rows.append([backend, fmt_eps(ours.get('train_eps')),
                     fmt_eps(book.get('train_eps')),
                     fmt_ratio(ratio(runs, f'{backend}:train_concise',
                                     f'{backend}:train_ch13'))])
    out.append(md_table(['backend', 'd2l.train_concise', 'd2l.train_ch13',
                         'ratio'], rows))
    out += ['', '### MXNET_CPU_TEMP_COPY', '',
            'd2lpar.mxnet sets it to 16 before importing MXNet unless it is '
            'set; MXNet\'s default is 4. `d2l.train` (MXNet), 2 devices, in '
            'fresh processes alternating 4, 16, 4, 16 (one in a quick run), '
            '2 runs each, best kept:', '']
    rows, temp = [], res['temp_copy']
    for value in ('4', '16'):
        t = temp.get(value) or {}
        if 'train_eps' in t:
            rows.append([value, f'{t["train_eps"]:.0f}', f'{t["e2e_eps"]:.0f}',
                         fmt_ratio(ratio(temp, value, '4'))])
        else:
            rows.append([value, 'no data', t.get('error', ''), '—'])
    out.append(md_table(['MXNET_CPU_TEMP_COPY', 'train ex/s',
                         'end-to-end ex/s', 'vs 4'], rows))
    return '\n'.join(out)


# ==========================================================================
# Section 3: lessons
# ==========================================================================
def code_key(path):
    """The code cells of a notebook, comments and layout ignored."""
    with open(path) as f:
        nb = json.load(f)
    key = []
    for cell in nb['cells']:
        if cell['cell_type'] != 'code':
            continue
        src = ''.join(cell['source'])
        try:
            key.append(ast.dump(ast.parse(src)))
        except SyntaxError:
            key.append(src)
    return key


def run_notebook(path):
    """Execute a notebook as nbval does (fresh python3 kernel, cwd = its
    folder, D2LPAR_DATA as the Makefile sets it); its wall time."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, D2LPAR_DATA=DATA_DIR)
    client = NotebookClient(nb, timeout=NOTEBOOK_CELL_TIMEOUT,
                            kernel_name='python3', resources={
                                'metadata': {'path': os.path.dirname(path)}})
    os.makedirs(LOG_DIR, exist_ok=True)
    name = os.path.relpath(path, os.path.join(ROOT, 'notebooks'))
    with open(os.path.join(LOG_DIR, 'nb-' + name.replace('/', '-')
                           + '.log'), 'w') as kernel_log:
        start = time.perf_counter()
        try:
            client.execute(env=env, stderr=kernel_log)
            error = None
        except Exception as e:  # a failing cell, a timeout, a dead kernel
            error = f'{type(e).__name__}: {str(e).strip().splitlines()[-1]}'\
                if str(e).strip() else type(e).__name__
        seconds = time.perf_counter() - start
    return seconds, error


def section_notebooks(args, deadline):
    paths = sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*', '*',
                                          '*.ipynb')))
    langs = None if args.languages == 'all' else args.languages.split(',')
    if args.quick and args.languages == 'en':
        chosen = [p for p in paths if '/en/' in p
                  and os.path.basename(p) == 'auto-parallelism.ipynb']
    else:
        chosen = [p for p in paths
                  if langs is None or p.split(os.sep)[-3] in langs]
    rows = []
    measured = {}
    for p in chosen:
        # Start a notebook only if it should end before the deadline,
        # guessing that it takes as long as the slowest one so far.
        guess = max([60] + [r['seconds'] for r in rows if r['seconds']])
        if time.monotonic() + guess > deadline:
            rows.append({'notebook': os.path.relpath(p, ROOT),
                         'seconds': None, 'measured': False, 'error': None,
                         'skipped': f'the --budget of {args.budget} s was '
                                    f'spent'})
            log(f'notebook {os.path.relpath(p, ROOT)}: skipped (budget)')
            continue
        log(f'notebook {os.path.relpath(p, ROOT)} ...')
        seconds, error = run_notebook(p)
        lang, fw, name = p.split(os.sep)[-3:]
        measured[(fw, name)] = measured.get((fw, name)) or (lang, seconds,
                                                            code_key(p))
        rows.append({'notebook': os.path.relpath(p, ROOT), 'seconds': seconds,
                     'measured': True, 'error': error})
        log(f'  {seconds:.1f} s' + (f' ({error})' if error else ''))
    for p in paths:
        if p in chosen:
            continue
        lang, fw, name = p.split(os.sep)[-3:]
        ref = measured.get((fw, name))
        if ref is None:
            rows.append({'notebook': os.path.relpath(p, ROOT),
                         'seconds': None, 'measured': False, 'error': None})
            continue
        rows.append({'notebook': os.path.relpath(p, ROOT),
                     'seconds': ref[1], 'measured': False,
                     'estimated_from': ref[0],
                     'same_code': code_key(p) == ref[2], 'error': None})
    rows.sort(key=lambda r: r['notebook'])
    return {'rows': rows, 'languages': args.languages}


def report_notebooks(res):
    out = ['## 3. Lessons', '',
           'Each notebook run top to bottom with nbclient in a fresh '
           '`python3` kernel of the venv, cwd = its folder, D2LPAR_DATA = '
           f'`{os.path.relpath(DATA_DIR, ROOT)}/` (as the Makefile sets '
           'it), one after the other.']
    rows, total, n_est = [], 0.0, 0
    for r in res['rows']:
        if r['measured']:
            how = 'measured' + (f' — **error**: {r["error"]}'
                                if r['error'] else '')
        elif r['seconds'] is not None:
            n_est += 1
            how = (f'estimated from {r["estimated_from"]} ('
                   + ('same code' if r['same_code'] else
                      'code differs: run with --languages all') + ')')
        else:
            how = 'not run' + (f': {r["skipped"]}' if r.get('skipped')
                               else '')
        if r['seconds'] is not None:
            total += r['seconds']
        rows.append([f'`{r["notebook"]}`', f'{r["seconds"]:.1f}'
                     if r['seconds'] is not None else '—', how])
    rows.append(['**total**', f'**{total:.0f}** ({total / 60:.1f} min)',
                 'sum of the above'])
    out += ['', md_table(['notebook', 'seconds', ''], rows)]
    if n_est:
        out += ['', f'{n_est} notebook(s) were not run here, to keep `make '
                'bench` short; their time is that of the same lesson and '
                'framework in another language (same code cells up to '
                'comments where it says so). `--languages all` runs them '
                'all.']
    out += ['', 'The sum is the estimate of a serial nbval run of these '
            'notebooks. `make test` runs nbval with `-n 2` (two notebooks '
            'at a time, the package tests beside them) on 2 cores, so its '
            'wall time lies roughly between half the sum and the sum.']
    res['total_seconds'] = total
    return '\n'.join(out)


# ==========================================================================
# Targets
# ==========================================================================
def verdict(ok):
    return 'NO DATA' if ok is None else ('PASS' if ok else 'MISS')


def targets(results):
    lines = []
    for fw, r in (results.get('standins') or {}).items():
        if 'error' in r:
            lines.append((verdict(None), f'{fw} stand-ins: no data'))
            continue
        both = r['lesson1']['both_over_sum']
        copy = r['lesson1']['copy_over_sum']
        two = r['lesson3']['two_over_one']
        lines += [
            (verdict(both <= TARGET_BOTH), f'{fw} lesson 1, two stand-ins '
             f'at once / sum of each alone: {both:.2f} (target <= '
             f'{TARGET_BOTH})'),
            (verdict(copy <= TARGET_COPY), f'{fw} lesson 1, compute and '
             f'copy / sum: {copy:.2f} (target <= {TARGET_COPY})'),
            (verdict(two >= TARGET_CONCISE), f'{fw} lesson 3, 2 stand-ins / '
             f'1: {fmt_ratio(two, 3)} (target >= {TARGET_CONCISE}x)')]
    ar = results.get('allreduce')
    if ar:
        for backend in ('torch', 'mxnet'):
            frac, name, own = best_fraction(ar, backend)
            lines.append(
                (verdict(None if frac is None else frac >= TARGET_FRACTION),
                 f'best d2lpar.{backend} allreduce at 64 MB, 4 devices: '
                 + (f'{frac:.0%} of the one-host limit ({name}; {own:.0%} '
                    f'of the limit set by {backend}\'s own copy bandwidth)'
                    if frac is not None else 'not measured')
                 + f' (target >= {TARGET_FRACTION:.0%})'))
    tr = results.get('training')
    if tr:
        runs = tr['runs']
        for backend in ('torch', 'mxnet'):
            s = ratio(runs, f'{backend}:d2l.train/2', f'{backend}:d2l.train/1')
            lines.append((verdict(None if s is None else s >= TARGET_SCALING),
                          f'{backend} d2l.train 2 devices / 1 device: '
                          f'{fmt_ratio(s, 3)} (target >= {TARGET_SCALING}x)'))
        for backend in ('torch', 'mxnet'):
            c = ratio(runs, f'{backend}:d2l.train/1', f'{backend}:chapter/1')
            spread = max((runs[k]['spread'] for k in
                          (f'{backend}:d2l.train/1', f'{backend}:chapter/1')
                          if runs.get(k)), default=0)
            noise = c is not None and c < 1.0 and 1.0 - c <= spread
            note = (f'run-to-run spread up to {spread:.0%}'
                    + (', so within noise' if noise else '')
                    if tr['config']['reps'] > 1 else 'one run each')
            lines.append((verdict(None if c is None else c >= 1.0),
                          f'{backend} d2l.train / chapter\'s loop, 1 device: '
                          f'{fmt_ratio(c, 3)} (target >= 1.00x; {note})'))
        for backend in ('torch', 'mxnet'):
            c = ratio(runs, f'{backend}:train_concise',
                      f'{backend}:train_ch13')
            lines.append((verdict(None if c is None else c >= 1.0),
                          f'{backend} train_concise / d2l.train_ch13, 1 '
                          f'device: {fmt_ratio(c, 3)} (target >= 1.00x)'))
    nb = results.get('notebooks')
    if nb:
        timed_rows = [r for r in nb['rows'] if r['seconds'] is not None]
        worst = max(timed_rows, key=lambda r: r['seconds'], default=None)
        slow = [r for r in timed_rows if r['seconds'] >= TARGET_NOTEBOOK_S]
        errors = [r for r in nb['rows'] if r['error']]
        missing = len(nb['rows']) - len(timed_rows)
        partial = f', {missing} not run' if missing else ''
        if worst:
            lines.append((verdict(None if missing and not slow
                                  else not slow and not errors),
                          f'every notebook under {TARGET_NOTEBOOK_S} s: '
                          f'slowest {worst["notebook"]} '
                          f'{worst["seconds"]:.0f} s'
                          + (f', {len(slow)} at or over' if slow else '')
                          + (f', {len(errors)} failed' if errors else '')
                          + partial
                          + (' (includes estimates)' if any(
                              not r['measured'] for r in slow) else '')))
        total = nb.get('total_seconds')
        if total is not None:
            lines.append((verdict(total < TARGET_NBVAL_S if not missing
                                  or total >= TARGET_NBVAL_S else None),
                          f'whole nbval run (estimated as the sum of the '
                          f'notebook times, serial): {total / 60:.1f} min'
                          + partial + f' (target < {TARGET_NBVAL_S // 60} '
                          f'min)'))
    return lines


# ==========================================================================
# Main
# ==========================================================================
def cpu_busy(seconds=1.0):
    """Fraction of the CPU time that was not idle over `seconds` (from
    /proc/stat): other work on the machine, before this run starts any."""
    def sample():
        with open('/proc/stat') as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total
    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def machine_notes():
    import importlib.metadata as md
    versions = {}
    for pkg in ('torch', 'mxnet', 'd2l', 'numpy'):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {'cores': CORES, 'platform': platform.platform(),
            'processor': platform.processor() or platform.machine(),
            'python': platform.python_version(), 'versions': versions,
            'loadavg_start': os.getloadavg()[0],
            'cpu_busy_before': cpu_busy(),
            'data': 'Fashion-MNIST (cached)' if real_data_cached()
            else 'stand-in (D2LPAR_OFFLINE=1 for the workers)'}


def load_line(notes):
    """The machine's load, and a warning when other work was running."""
    peak = max([load for _, load in notes['loadavg_trace']],
               default=notes['loadavg_end'])
    busy = notes['cpu_busy_before']
    line = (f'CPU busy with other work in the second before the run: '
            + ('unknown' if busy is None else f'{busy:.0%}')
            + f'; load average (1 min) before it {notes["loadavg_start"]:.1f}'
            f', highest seen during it {peak:.1f}.')
    if busy is not None and busy > 0.25 or busy is None and \
            notes['loadavg_start'] > 0.5 * CORES:
        line += (f' **Other work was running on this {CORES}-core machine**: '
                 f'the seconds are inflated, and the ratios, though measured '
                 f'side by side, are noisier.')
    return line


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: fewer sizes, repeats and examples')
    parser.add_argument('--skip-notebooks', action='store_true',
                        help='skip section 3 (the lessons)')
    parser.add_argument('--languages', default='en',
                        help="notebook languages to run, comma-separated, "
                             "or 'all' (default: en; the others are "
                             "estimated from it)")
    parser.add_argument('--budget', type=float, default=570,
                        help='seconds for the whole run: notebooks that '
                             'would end after it are skipped (default: '
                             '570)')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument('--spec', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker, json.loads(args.spec), args.out)
        return 0

    start, start_mono = time.perf_counter(), time.monotonic()
    os.makedirs(LOG_DIR, exist_ok=True)
    for old in glob.glob(os.path.join(LOG_DIR, '*.log')):
        os.remove(old)  # the logs of this run only
    notes = machine_notes()
    log(f'{"quick" if args.quick else "full"} run; logs in '
        f'{os.path.relpath(LOG_DIR, ROOT)}/')
    results = {'meta': notes, 'args': vars(args)}
    results['standins'] = section_standins(args)
    results['allreduce'] = section_allreduce(args)
    results['training'] = section_training(args)
    if not args.skip_notebooks:
        results['notebooks'] = section_notebooks(
            args, deadline=start_mono + args.budget)

    notes['loadavg_end'] = os.getloadavg()[0]
    notes['loadavg_trace'] = LOAD_TRACE
    notes['seconds'] = time.perf_counter() - start
    v = notes['versions']
    head = ['# d2lpar benchmark', '',
            f'{datetime.datetime.now():%Y-%m-%d %H:%M}, '
            f'{"quick" if args.quick else "full"} run. {CORES} CPU cores, '
            f'{notes["platform"]}; no GPU unless the tables say so (CPU '
            f'stand-in devices). torch {v["torch"]}, mxnet {v["mxnet"]}, d2l '
            f'{v["d2l"]}. Data: {notes["data"]}.',
            load_line(notes)]
    sections = [report_standins(results['standins']),
                report_allreduce(results['allreduce']),
                report_training(results['training'])]
    if 'notebooks' in results:
        sections.append(report_notebooks(results['notebooks']))
    lines = targets(results)
    results['targets'] = [{'verdict': a, 'target': b} for a, b in lines]
    tail = ['## Targets', ''] + [f'- {a}: {b}' for a, b in lines] + [
        '', f'Benchmark wall time: {notes["seconds"]:.0f} s.']
    text = '\n\n'.join(['\n'.join(head)] + sections + ['\n'.join(tail)]) + '\n'
    print(text)
    with open(os.path.join(OUT_DIR, 'results.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(OUT_DIR, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1, default=str)
    log(f'wrote {os.path.relpath(OUT_DIR, ROOT)}/results.md and results.json '
        f'in {notes["seconds"]:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
