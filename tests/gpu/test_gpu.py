"""Stricter checks for machines with GPUs (`make test-gpu`; elsewhere they
are skipped, see conftest):

- PyTorch sees the GPUs, and d2lpar hands them out (no CPU stand-ins);
- MXNet's GPUs are reported (the PyPI wheel is CPU-only), and required
  with D2LPAR_REQUIRE_MXNET_GPU=1;
- on two GPUs, the lesson's workload (50 products of 4000x4000 matrices on
  each GPU) queued on both at once takes clearly less than the two alone
  one after the other (< 0.8 of the sum), close to the slower one alone
  (< 1.25 times it): lesson 1;
- training on two GPUs reaches the one-GPU test accuracy within 0.02
  (lesson 2's run: batch 256, lr 0.1, 10 epochs).

What the lessons say about GPUs is checked here and in
test_lessons_on_gpu.py.
"""
import os
import time

import pytest

from .conftest import mxnet_gpus

SIZE = 4000          # the book's workload on GPUs
PRODUCTS = 50
MAX_RATIO = 0.8      # both together / (one alone + the other alone)
MAX_OF_SLOWER = 1.25  # both together / the slower one alone
ACC_TOLERANCE = 0.02
REPEAT = 3           # timings: best of


def need_mxnet_gpus(k):
    n = mxnet_gpus()
    if n >= k:
        return
    from mxnet.runtime import Features
    message = f'MXNet sees {n} GPU(s), this check needs {k}'
    if not Features().is_enabled('CUDA'):
        message += (': this MXNet is built without CUDA, like the mxnet '
                    'wheel from PyPI (install mxnet-cuXXX==1.9.1 for MXNet '
                    'on GPUs)')
    if os.environ.get('D2LPAR_REQUIRE_MXNET_GPU') == '1':
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


# -- the workload, for either framework --------------------------------------
def torch_workload(devices, size=SIZE):
    import torch
    from d2lpar import torch as d2l
    xs = [torch.rand(size=(size, size), device=d) for d in devices]

    def run(x):
        return [x.mm(x) for _ in range(PRODUCTS)]
    return xs, run, lambda: d2l.synchronize(devices)


def mxnet_workload(devices, size=SIZE):
    from mxnet import np, npx
    xs = [np.random.uniform(size=(size, size), ctx=d) for d in devices]

    def run(x):
        return [np.dot(x, x) for _ in range(PRODUCTS)]
    return xs, run, npx.waitall


def time_both(workload, devices, size=SIZE):
    """Seconds (best of REPEAT) of the workload on device 1 alone, device 2
    alone, and both queued together with one wait at the end."""
    (x1, x2), run, wait = workload(devices, size)
    run(x1), run(x2)  # warm up: kernels, algorithms, memory
    wait()

    def best(work):
        times = []
        for _ in range(REPEAT):
            wait()
            start = time.perf_counter()
            work()
            wait()
            times.append(time.perf_counter() - start)
        return min(times)

    alone1 = best(lambda: run(x1))
    alone2 = best(lambda: run(x2))
    both = best(lambda: (run(x1), run(x2)))
    return alone1, alone2, both


# -- the checks ---------------------------------------------------------------
def test_pytorch_gpus_are_used():
    import torch
    from d2lpar import torch as d2l
    n = torch.cuda.device_count()
    print(f'PyTorch {torch.__version__} (CUDA {torch.version.cuda}): {n} '
          f'GPU(s): {[torch.cuda.get_device_name(i) for i in range(n)]}')
    assert d2l.num_gpus() == n >= 1
    assert torch.device(d2l.try_gpu()).type == 'cuda'
    devices = [torch.device(d) for d in d2l.try_devices(n)]
    assert [d.type for d in devices] == ['cuda'] * n, devices
    assert len({d.index for d in devices}) == n, \
        f'try_devices({n}) repeats a GPU: {devices}'
    x = torch.ones(3, device=devices[-1])
    assert (x + x).sum().item() == 6


def test_mxnet_gpus_reported():
    n = mxnet_gpus()
    print(f'MXNet sees {n} GPU(s)')
    need_mxnet_gpus(1)
    from mxnet import np
    from d2lpar import mxnet as d2l
    devices = d2l.try_devices(n)
    assert [d.device_type for d in devices] == ['gpu'] * n, devices
    x = np.ones(3, ctx=devices[-1])
    assert float((x + x).sum()) == 6


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
def test_two_gpus_compute_at_once(framework, two_gpus):
    if framework == 'torch':
        import torch
        devices, workload = [torch.device('cuda', i) for i in (0, 1)], \
            torch_workload
    else:
        need_mxnet_gpus(2)
        import mxnet
        devices, workload = [mxnet.gpu(0), mxnet.gpu(1)], mxnet_workload
    alone1, alone2, both = time_both(workload, devices)
    # Lesson 1: "On two devices the total is well below the sum of its
    # parts, close to the time of the slower device alone"
    ratio = both / (alone1 + alone2)
    print(f'{framework}: GPU 0 alone {alone1:.3f} s, GPU 1 alone '
          f'{alone2:.3f} s, both {both:.3f} s: {ratio:.2f} of the sum')
    assert ratio < MAX_RATIO, \
        f'{framework}: {PRODUCTS} products of {SIZE}x{SIZE} matrices on ' \
        f'two GPUs at once took {both:.3f} s, {ratio:.2f} of the sum of ' \
        f'the two alone ({alone1:.3f} + {alone2:.3f} s); expected < ' \
        f'{MAX_RATIO}: the GPUs did not run in parallel'
    slower = max(alone1, alone2)
    assert both < MAX_OF_SLOWER * slower, \
        f'{framework}: both GPUs took {both:.3f} s, more than ' \
        f'{MAX_OF_SLOWER} times the slower one alone ({slower:.3f} s)'


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
def test_two_gpu_training_matches_one_gpu(framework, two_gpus, real_data):
    if framework == 'torch':
        import torch
        from d2lpar import torch as d2l
        seed = torch.manual_seed
    else:
        need_mxnet_gpus(2)
        import mxnet
        from d2lpar import mxnet as d2l
        seed = mxnet.random.seed
    results = []
    for k in (1, 2):
        seed(0)
        # Lesson 2's run on GPUs: batch 256, lr 0.1, 10 epochs; "The test
        # accuracy comes out within a point or two"
        results.append(d2l.train(k, 256, 0.1, num_epochs=10, plot=False))
    one, two = results
    print(f'{framework}: 1 GPU: {one}; 2 GPUs: {two}')
    assert len(set(two.devices)) == 2 and all(
        'cuda' in d or 'gpu' in d for d in one.devices + two.devices), \
        f'{framework}: trained on {one.devices} and {two.devices}, ' \
        f'not on GPUs'
    assert abs(two.test_acc - one.test_acc) <= ACC_TOLERANCE, \
        f'{framework}: test accuracy {two.test_acc:.3f} on 2 GPUs, ' \
        f'{one.test_acc:.3f} on 1 GPU: more than {ACC_TOLERANCE} apart'
