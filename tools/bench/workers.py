"""The workers of sections 1 and 2: each runs in a process of its own
(``python -m tools.bench --worker NAME``), imports one framework and
returns what it measured as a dict (written as JSON)."""

import os
import time
from unittest import mock

from tools.bench.settings import CONCISE, LARGE


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
                repeat=repeat_for(nbytes, spec['repeat']))
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
            d2l.train_batch(X, y, device_params, devices=devices, lr=lr)
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
                              batch_size=c['batch_size'], lr=c['lr'],
                              num_epochs=c['num_epochs'],
                              num_train=c['num_train'], num_test=c['num_test'],
                              plot=False)
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
    """MXNet Gluon peer: the Gluon LeNet of lesson 4's script with the
    initial values `params`, gluon.Trainer with kvstore 'device', one wait
    per epoch."""
    from mxnet import autograd, gluon, npx
    from d2lpar.distributed.kvstore_train import lenet
    devices = d2l.try_devices(k)
    net = lenet(params, devices)
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


def worker_ddp(spec):
    """One rank of PyTorch DistributedDataParallel over gloo: every rank
    reads the same global minibatches and trains on its share."""
    d2l = import_backend('torch')
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from d2lpar.distributed.ddp_train import lenet
    torch.manual_seed(0)
    dist = init_gloo(spec)
    rank, world = spec['rank'], spec['world']
    try:
        params = d2l.lenet_params()
        net = lenet(params)  # lesson 4's module, with these values
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
            # start from the same values every time
            net.load_state_dict(lenet(params).state_dict())
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
