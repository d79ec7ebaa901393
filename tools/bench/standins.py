"""Section 0's worker: CPU stand-ins measured with the calls of the
lessons themselves (lessons 1 and 3)."""

import statistics
import time

from tools.bench.settings import (
    CONCISE_STANDINS, LESSON1_A, LESSON1_B, LESSON1_SIZE)
from tools.bench.workers import import_backend


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
        r = d2l.train_concise(net, d2l.try_devices(k),
                              batch_size=k * c['batch_size'],
                              lr=k * c['lr'], num_epochs=c['num_epochs'],
                              num_train=c['num_train'],
                              num_test=c['num_test'], plot=False)
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
