"""What the lessons say about GPUs, measured on GPUs (`make test-gpu`;
elsewhere skipped, see conftest). Each check names the sentences it
stands behind; a GPU statement of a lesson that no check here or in
test_gpu.py measures is worded in the lesson as an expectation, with its
source (the book's recorded runs, or the hardware's documentation).

- lesson 1: on one GPU, copies queued on the side stream run while later
  products compute, on the timeline, and compute and copy together take
  less than the two one after the other; the workload fits the GPU's free
  memory (`products_that_fit`);
- lesson 1: copies queued on the compute stream do not overlap;
- lesson 1, exercise 3: with pinned buffers and non-blocking copies the
  loop returns while the GPU still works, so the CPU's product runs beside
  it; with pageable buffers and blocking copies it does not;
- lesson 4: two processes when only one GPU is visible
  (CUDA_VISIBLE_DEVICES=0) run, on the CPU, and say where each rank ran;
  the lesson's two runs use the same kind of device and agree after the
  first step; a process alone on the GPU times its allreduce with CUDA
  events; on two GPUs, each process takes one, with NCCL;
- lesson 4 (MXNet): workers on GPUs, skipped, with the reason, when MXNet
  sees no GPU (the pinned mxnet wheel is built without CUDA).
"""
import time

import numpy as np
import pytest

from d2lpar import distributed

from .conftest import mxnet_gpus
from .test_gpu import need_mxnet_gpus

SIZE = 4000          # lesson 1's matrices on a GPU
PRODUCTS = 50
MIN_OVERLAP = 0.5    # of the copies' time, spent beside a product
MAX_RATIO = 0.85     # compute and copy together / (compute + copy)
REPEAT = 3           # timings: best of
# Lesson 4's runs, smaller: 1024 examples, 4 steps of a global batch of 256
ARGS = ['--num-train', 1024, '--num-test', 512, '--batch-size', 256,
        '--epochs', 1, '--seed', 0]


# -- lesson 1: the side stream ------------------------------------------------
def overlap(span, others):
    """Seconds of `span` (start, end) covered by the union of `others`."""
    a, b = span
    covered, end = 0.0, a
    for c, d in sorted(others):
        c, d = max(c, end), min(d, b)
        if d > c:
            covered += d - c
            end = d
    return covered


def test_side_stream_copies_overlap_the_products():
    """Lesson 1 (PyTorch), 'Parallel Computation and Communication':
    - "On a GPU, `launch(..., queue='copy')` queues the copy on a side
      stream ... so each copy starts once its product is done while the
      next products keep the GPU's compute units busy" (and the test
      below: "Without the side stream ... nothing would overlap");
    - "the copies (orange) run while later products (blue) are still
      being computed, in the two lanes of the GPU's row" and the
      timeline's "A GPU gets one row for all of its streams";
    - "On a GPU, computing and copying together take less time than the
      two one after the other"; the table's "the GPU computes while its
      copy engine moves data: overlap";
    - the copy of a result and its product take "the same order of
      time" (the hardware's figures: within a factor of 10 here);
    - "On a GPU, `launch` just calls `fn`: its kernels are queued on the
      GPU's stream, so the call returns before they run", and
      `synchronize` waits for every stream of the device (the pinned
      buffers, filled by the side stream, hold the products after it);
    - the workload fits this GPU (`products_that_fit`)."""
    import torch
    from d2lpar import torch as d2l
    device = torch.device('cuda', 0)
    # As the lesson does it
    num_products = d2l.products_that_fit(PRODUCTS, (SIZE, SIZE), [device])
    print(f'{num_products} products of {SIZE}x{SIZE} fit on {device} '
          f'({torch.cuda.get_device_name(device)})')
    a = b = torch.rand(size=(SIZE, SIZE), device=device)
    y = [torch.empty(size=(SIZE, SIZE), device=device)
         for _ in range(num_products)]
    y_cpu = [torch.empty(size=(SIZE, SIZE), pin_memory=True)
             for _ in range(num_products)]

    def products(a, b, y):
        for t in y:
            torch.mm(a, b, out=t)
        return y

    def copy_to_cpu(y, y_cpu, non_blocking=False):
        for t, buffer in zip(y, y_cpu):
            buffer.copy_(t, non_blocking=non_blocking)

    def compute_and_copy():
        for t, buffer in zip(y, y_cpu):
            product = d2l.launch(device, products, a, b, [t])
            d2l.launch(device, copy_to_cpu, product, [buffer], True,
                       queue='copy')

    def best(work):
        times = []
        for _ in range(REPEAT):
            d2l.synchronize([device])
            start = time.perf_counter()
            work()
            d2l.synchronize([device])
            times.append(time.perf_counter() - start)
        return min(times)

    compute_and_copy()  # warm up
    d2l.synchronize([device])
    start = time.perf_counter()
    d2l.launch(device, products, a, b, y)
    queued = time.perf_counter() - start
    d2l.synchronize([device])
    finished = time.perf_counter() - start
    print(f'launch returned after {queued:.4f} s, synchronize after '
          f'{finished:.4f} s')
    assert finished > 5 * queued, 'launch waited for the products'
    compute = best(lambda: d2l.launch(device, products, a, b, y))
    copy = best(lambda: d2l.launch(device, copy_to_cpu, y, y_cpu,
                                   queue='copy'))
    both = best(compute_and_copy)
    ratio = both / (compute + copy)
    print(f'compute {compute:.3f} s, copy {copy:.3f} s, both {both:.3f} s: '
          f'{ratio:.2f} of the sum')

    for buffer in y_cpu:
        buffer.zero_()
    with d2l.Timeline() as tl:
        compute_and_copy()
    d2l.synchronize([device])
    expected = (a @ a).cpu()
    assert all(torch.allclose(buffer, expected) for buffer in y_cpu), \
        'a pinned buffer does not hold its product after synchronize'
    row = [e for e in tl.events if e.row == f'cuda:{device.index}']
    kernels = [(e.start, e.end) for e in row if e.kind == 'compute']
    copies = [(e.start, e.end) for e in row if e.kind == 'copy']
    assert len(copies) >= num_products, \
        f'{len(copies)} copies on the timeline, {num_products} queued: ' \
        f'{sorted({e.name for e in row})}'
    copying = sum(b - a for a, b in copies)
    beside = sum(overlap(c, kernels) for c in copies)
    print(f'copies: {copying * 1e3:.1f} ms, of which {beside * 1e3:.1f} ms '
          f'beside a product')
    assert beside >= MIN_OVERLAP * copying, \
        f'only {beside / copying:.0%} of the copies\' time overlaps a ' \
        f'product on the timeline (expected >= {MIN_OVERLAP:.0%})'
    assert 0.1 < copy / compute < 10, \
        f'copying ({copy:.3f} s) and computing ({compute:.3f} s) are not ' \
        f'of the same order of time'
    assert ratio < MAX_RATIO, \
        f'compute and copy together took {ratio:.2f} of compute + copy ' \
        f'(expected < {MAX_RATIO})'


@pytest.mark.parametrize('pinned', [True, False])
def test_exercise_3_cpu_product_beside_the_gpu(pinned):
    """Lesson 1 (PyTorch), exercise 3's solution: "PyTorch's loop returns
    as soon as it has queued the 8 products and their 8 copies ... The
    CPU's product then runs in the calling thread while the GPU still
    works through its queue"; "Into ordinary (pageable) buffers, or
    without `non_blocking=True`, each copy would make Python wait until
    it was done ... the CPU's product would start only once the GPU had
    finished"."""
    import torch
    from d2lpar import torch as d2l
    device = torch.device('cuda', 0)
    size = 2048  # the solution's size on a GPU
    a = torch.rand(size=(size, size), device=device)
    on_cpu = torch.rand(size=(size, size))
    results = [torch.empty(size=(size, size), device=device)
               for _ in range(8)]
    buffers = [torch.empty(size=(size, size), pin_memory=pinned)
               for _ in range(8)]

    def products(a, y):
        for t in y:
            torch.mm(a, a, out=t)
        return y

    def copy_to_cpu(y, y_cpu, non_blocking=False):
        for t, buffer in zip(y, y_cpu):
            buffer.copy_(t, non_blocking=non_blocking)

    def queue_all():
        for t, buffer in zip(results, buffers):
            product = d2l.launch(device, products, a, [t])
            copy = d2l.launch(device, copy_to_cpu, product, [buffer],
                              pinned, queue='copy')
        return copy

    queue_all()  # warm up
    d2l.synchronize([device])
    last_copy = queue_all()
    busy = not last_copy.cuda_event.query()
    on_cpu.mm(on_cpu)  # the CPU's product, in this thread
    d2l.synchronize([device])
    expected = (a @ a).cpu()
    assert all(torch.allclose(b, expected) for b in buffers)
    print(f'pinned={pinned}: GPU still busy when the loop returned: {busy}')
    assert busy == pinned, (
        'the loop returned before the copies were done' if busy else
        'the loop waited for the copies: the CPU product runs after them')


def test_copies_on_the_compute_stream_do_not_overlap():
    """Lesson 1 (PyTorch): "Without the side stream the copies would sit
    in the compute stream's queue, each one waiting for the product
    before it, and nothing would overlap": with the copies queued on the
    compute stream, the timeline shows (almost) no copy beside a
    product."""
    import torch
    from d2lpar import torch as d2l
    device = torch.device('cuda', 0)
    n = min(10, d2l.products_that_fit(PRODUCTS, (SIZE, SIZE), [device]))
    a = torch.rand(size=(SIZE, SIZE), device=device)
    y = [torch.empty(size=(SIZE, SIZE), device=device) for _ in range(n)]
    y_cpu = [torch.empty(size=(SIZE, SIZE), pin_memory=True)
             for _ in range(n)]

    def one_stream():
        for t, buffer in zip(y, y_cpu):
            torch.mm(a, a, out=t)
            buffer.copy_(t, non_blocking=True)  # the same stream

    one_stream()  # warm up
    d2l.synchronize([device])
    with d2l.Timeline() as tl:
        one_stream()
    row = [e for e in tl.events if e.row == f'cuda:{device.index}']
    kernels = [(e.start, e.end) for e in row if e.kind == 'compute']
    copies = [(e.start, e.end) for e in row if e.kind == 'copy']
    assert len(copies) >= n
    copying = sum(b - a for a, b in copies)
    beside = sum(overlap(c, kernels) for c in copies)
    print(f'one stream: {beside / copying:.0%} of the copies\' time beside '
          f'a product')
    assert beside < 0.1 * copying


# -- lesson 4: two processes, one visible GPU ---------------------------------
def where(result):
    """'rank 0: cuda:0 (nccl)' for each process of `result`."""
    return [f'rank {p["rank"]}: {p["device"]} ({p["backend"]})'
            for p in result.processes]


def test_two_processes_on_one_visible_gpu(tmp_path, monkeypatch, capsys):
    """Lesson 4, 'What Your Machine Will Show' (PyTorch): "With fewer GPUs
    than processes (two processes on Colab's one GPU, say), every process
    trains on the CPU with Gloo, and the launcher says so", and the
    settings cell: both runs use the same kind of device (on one GPU, the
    CPU), so the first steps agree within 1e-5. Also: the script started
    by hand with torchrun falls back by itself, and a process alone on the
    GPU (nccl) times compute and communication with CUDA events (its
    communication hook never waits for the GPU)."""
    from d2lpar import devices
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0')
    # The parent's CUDA may already count every GPU: tell the launcher
    # what the processes will see
    visible = 1
    use_gpus = visible >= 2  # lesson 4's settings: d2l.num_gpus() >= 2

    def launch(k, name, **options):
        result = distributed.launch_torch(k, tmp_path / name, ARGS,
                                          timeout=300, **options)
        print(f'{name}:', '; '.join(where(result)))
        return result

    alone = launch(1, 'gpu-alone', num_gpus=visible)
    one = launch(1, 'one', num_gpus=visible, use_gpus=use_gpus)
    two = launch(2, 'two', num_gpus=visible, use_gpus=use_gpus)
    said = capsys.readouterr().out
    assert devices.choose_gpu(1, 0, 2)[1] in said
    # By hand: torchrun without --cpu, the script decides for itself
    by_hand = launch(2, 'by-hand', num_gpus=2)
    log = (tmp_path / 'by-hand' / 'torchrun.log').read_text()
    assert 'all processes train on the CPU' in log, log[-2000:]

    assert where(alone) == ['rank 0: cuda:0 (nccl)']
    p = alone.processes[0]
    assert p['seconds_compute'] > 0 and p['seconds_communication'] > 0
    assert p['seconds_total'] >= p['seconds_compute']
    for result, k in ((one, 1), (two, 2), (by_hand, 2)):
        assert where(result) == [f'rank {r}: cpu (gloo)' for r in range(k)]
    first, second = one.first_step_params(), two.first_step_params()
    largest = max(float(np.abs(first[n] - second[n]).max()) for n in first)
    assert largest < 1e-5, \
        f'1 and 2 processes differ by {largest:.1e} after step 1'


def test_two_processes_on_two_gpus(tmp_path, two_gpus):
    """Lesson 4 (PyTorch): "On a machine with at least as many GPUs as
    processes, the same script gives each process its own GPU and uses
    NCCL instead of Gloo"; with the lesson's use_gpus (two GPUs: True),
    the one-process run takes a GPU too."""
    one = distributed.launch_torch(1, tmp_path / 'one', ARGS, timeout=300,
                                   use_gpus=True)
    two = distributed.launch_torch(2, tmp_path / 'two', ARGS, timeout=300,
                                   use_gpus=True)
    print('; '.join(where(one) + where(two)))
    assert where(one) == ['rank 0: cuda:0 (nccl)']
    assert where(two) == ['rank 0: cuda:0 (nccl)', 'rank 1: cuda:1 (nccl)']


# -- lesson 4 with MXNet: workers on GPUs -------------------------------------
def test_mxnet_workers_train_on_gpus(tmp_path):
    """Lesson 4, 'What Your Machine Will Show' (MXNet): "With a CUDA build
    of MXNet ..., each worker computes on a GPU of its own when the
    machine has at least as many GPUs as workers". Skipped, with the
    reason, where MXNet sees no GPU: the pinned mxnet wheel is a CPU
    build."""
    need_mxnet_gpus(1)
    k = min(mxnet_gpus(), 2)
    result = distributed.launch_kvstore(k, tmp_path, ARGS, timeout=300)
    print('; '.join(where(result)))
    assert [p['device'] for p in result.processes] == \
        [f'gpu({i})' for i in range(k)]
