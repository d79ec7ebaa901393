"""d2lpar for PyTorch: ``from d2lpar import torch as d2l``.

The same public names, with the same signatures, as ``d2lpar.mxnet``.
Everything runs on a CPU-only machine: where a lesson asks for more GPUs
than there are, `try_devices` hands out CPU stand-ins and says so once.
"""
import copy
import os
import time

# Keep the profiler's own log lines out of the lessons (set before torch).
os.environ.setdefault('KINETO_LOG_LEVEL', '5')

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.profiler import record_function  # noqa: E402

from d2lpar import (  # noqa: E402
    _backend, api as _api, checks as _checks, collectives as _collectives,
    training as _training)
from d2lpar._backend import MLP_SHAPES  # noqa: E402,F401
from d2lpar._timer import Timer  # noqa: E402,F401
from d2lpar.api import (  # noqa: E402,F401 (api.SHARED, as they are)
    allreduce_time, Animator, bubble_fraction, collective_seconds,
    compute_time, critical_batch, data_dir, data_source, DataError,
    DistributedResult, epoch_shards, fashion_mnist_arrays, fmt, format_seconds,
    gpipe_schedule, Gpu, gpu_link, GPUS, interleaved_schedule, learning_rate,
    Link, LINKS, measured_bubble, pad, plot_allreduce, plot_cost_model,
    plot_drift, plot_memory, plot_processes, plot_scaling, plot_step_time,
    plot_timings, print_processes, say_once, shard_bounds, source_code,
    step_time, TrainResult, use_language, zero_memory)
from d2lpar.checks import (  # noqa: E402,F401 (the checks lessons call)
    check_devices, check_replicas, check_split)
from d2lpar._torch.backend import BACKEND  # noqa: E402
from d2lpar._torch.devices import (  # noqa: E402,F401 (framework glue)
    Benchmark, cpu, launch, num_gpus, synchronize, _threads_of)
from d2lpar._torch.arrays import (  # noqa: E402,F401 (compatibility)
    astype, concat, device_of, grad_of, no_grad, relu, to_device, zeros)
from d2lpar._torch.models import (  # noqa: E402,F401
    adam, gpipe_step, loss, sgd)
from d2lpar._torch.processes import _run_processes  # noqa: E402
from d2lpar._torch.timeline import Timeline  # noqa: E402

__all__ = _api.SHARED + _api.BACKEND
_backend.prepare()  # fonts; figures as SVG in Jupyter
# The name the lessons' code, generated below, uses for this module
from d2lpar import torch as d2l  # noqa: E402


# --------------------------------------------------------------------------
# Written once for both frameworks (d2lpar/_backend.py, which documents
# them), here with PyTorch's backend object
# --------------------------------------------------------------------------
@_backend.docstring_of(_backend.gpu)
def gpu(i=0):
    return _backend.gpu(BACKEND, i)


@_backend.docstring_of(_backend.try_gpu)
def try_gpu(i=0):
    return _backend.try_gpu(BACKEND, i)


@_backend.docstring_of(_backend.try_all_gpus)
def try_all_gpus():
    return _backend.try_all_gpus(BACKEND)


@_backend.docstring_of(_backend.try_devices)
def try_devices(num_devices):
    return _backend.try_devices(BACKEND, num_devices)


@_backend.docstring_of(_backend.copy_bandwidth)
def copy_bandwidth(device=None, num_bytes=1 << 26):
    return _backend.copy_bandwidth(BACKEND, device, num_bytes)


@_backend.docstring_of(_backend.products_that_fit)
def products_that_fit(num_products, shape, devices):
    return _backend.products_that_fit(BACKEND, num_products, shape, devices)


@_backend.docstring_of(_backend.measure_allreduce)
def measure_allreduce(fns, sizes, device_counts, *, repeat=3):
    return _backend.measure_allreduce(BACKEND, fns, sizes, device_counts,
                                      repeat=repeat)


@_backend.docstring_of(_backend.load_data_fashion_mnist)
def load_data_fashion_mnist(batch_size, num_train=None, num_test=None):
    return _backend.load_data_fashion_mnist(BACKEND, batch_size, num_train,
                                            num_test)


@_backend.docstring_of(_backend.check_allreduce)
def check_allreduce(data):
    return _backend.check_allreduce(BACKEND, data)


@_backend.docstring_of(_backend.check_collective)
def check_collective(arrays, name, same_rows=True):
    return _backend.check_collective(BACKEND, arrays, name, same_rows)


@_backend.docstring_of(_backend.check_finite)
def check_finite(params, epoch, lr):
    return _backend.check_finite(BACKEND, params, epoch, lr)


@_backend.docstring_of(_backend.ring_allreduce)
def ring_allreduce(data):
    return _backend.ring_allreduce(BACKEND, data)


@_backend.docstring_of(_backend.parameter_drift)
def parameter_drift(params, batch_size, lr, *, num_steps=20, num_train=None,
                    num_test=None):
    return _backend.parameter_drift(
        BACKEND, params, batch_size, lr, get_params=get_params,
        train_batch=train_batch, try_devices=try_devices,
        num_steps=num_steps, num_train=num_train, num_test=num_test)


@_backend.docstring_of(_backend.train_distributed)
def train_distributed(num_workers, *, batch_size=256, lr=0.2, num_epochs=2,
                      num_train=None, num_test=None, port=None, timeout=300,
                      crash_at_step=None, use_gpus=None, sharded=False,
                      optimizer='sgd', pipelined=False, checkpoint=False,
                      fail_at_step=None, max_restarts=0, amp=False,
                      accumulate=1, naive_accumulate=False):
    return _backend.train_distributed(
        BACKEND, num_workers, batch_size=batch_size, lr=lr,
        num_epochs=num_epochs, num_train=num_train, num_test=num_test,
        port=port, timeout=timeout, crash_at_step=crash_at_step,
        use_gpus=use_gpus, sharded=sharded, optimizer=optimizer,
        pipelined=pipelined, checkpoint=checkpoint,
        fail_at_step=fail_at_step, max_restarts=max_restarts, amp=amp,
        accumulate=accumulate, naive_accumulate=naive_accumulate)


@_backend.docstring_of(_backend.distributed_commands)
def distributed_commands(hosts, workers_per_host=1, *, port=29500,
                         out_dir='OUT', script_args=(), max_restarts=0):
    return _backend.distributed_commands(
        BACKEND, hosts, workers_per_host, port=port, out_dir=out_dir,
        script_args=script_args, max_restarts=max_restarts)


@_backend.docstring_of(_backend.mlp_params)
def mlp_params():
    return _backend.mlp_params(BACKEND)


@_backend.docstring_of(_backend.mlp)
def mlp(X, flat):
    return _backend.mlp(BACKEND, X, flat)


@_backend.docstring_of(_backend.held_bytes)
def held_bytes(replica):
    return _backend.held_bytes(BACKEND, replica)


@_backend.docstring_of(_backend.pipeline_params)
def pipeline_params(width=512):
    return _backend.pipeline_params(BACKEND, width)


@_backend.docstring_of(_backend.stage_forward)
def stage_forward(X, params, last=False):
    return _backend.stage_forward(BACKEND, X, params, last)


# --------------------------------------------------------------------------
# Data parallelism from scratch
# --------------------------------------------------------------------------
def direct_allreduce(data):
    """Like `allreduce`, but every device adds up a chunk of its own: it
    reads chunk i of every array straight from its device (a
    reduce-scatter), then sends its sum straight to every device (an
    all-gather). Each device sends 2(k-1)/k of the data, as in the ring."""
    check_allreduce(data)
    k = len(data)
    with torch.no_grad():
        flats = [BACKEND.flat(x) for x in data]
        b = _collectives.chunk_bounds(flats[0].shape[0], k)
        for c in range(k):
            own = flats[c][b[c]:b[c + 1]]  # a view: added in place
            for i in range(1, k):
                own += BACKEND.copy_like(
                    flats[(c + i) % k][b[c]:b[c + 1]], own)
        for c in range(k):
            for i in range(1, k):
                flats[(c + i) % k][b[c]:b[c + 1]].copy_(
                    flats[c][b[c]:b[c + 1]])


def train_step_timeline(X, y, device_params, *, devices, lr, reduce=None):
    """Run one step of `train_batch` (gradients summed with `reduce`,
    `allreduce` by default), the same computation in the same order, and
    return its `Timeline`: the split, the allreduce and the
    update are marked with ``torch.profiler.record_function``; on CPU
    stand-ins each device's forward and backward pass is a bar of its
    own row."""
    reduce = allreduce if reduce is None else reduce
    check_replicas(device_params, devices)
    with Timeline() as timeline:
        with record_function('split'):
            X_shards, y_shards = split_batch(X, y, devices)
        jobs = [launch(device, forward_backward, X_shard, y_shard, params)
                for X_shard, y_shard, params, device in zip(
                    X_shards, y_shards, device_params, devices)]
        for job in jobs:
            job.result()
        with record_function('allreduce'), torch.no_grad():
            for i in range(len(device_params[0])):
                reduce([params[i].grad for params in device_params])
        with record_function('update'):
            for params in device_params:
                sgd(params, lr, X.shape[0])
    return timeline


# --------------------------------------------------------------------------
# Concise implementation: ResNet-18 with DistributedDataParallel
# --------------------------------------------------------------------------
def train_concise(net, devices, *, batch_size, lr, num_epochs=10,
                  num_train=None, num_test=None, warmup_epochs=0,
                  plot=True):
    """Train the classifier `net` on Fashion-MNIST with data parallelism
    over `devices`, with the framework's own tools: one process per device
    and DistributedDataParallel (gloo on CPUs, nccl on GPUs); on one
    device, in this process. `batch_size` is the global batch, cut into
    one shard per device; the learning rate warms up linearly from
    ``lr / warmup_steps`` over `warmup_epochs` epochs, then decays to 0
    (cosine). Plots the test accuracy per epoch, leaves the trained
    parameters in `net` (on ``devices[0]``, in evaluation mode), and
    returns a `TrainResult`. A process that fails stops the run with a
    RuntimeError that shows its error. The processes are spawned, so a
    script that calls this on several devices must do so under
    ``if __name__ == '__main__':``."""
    devices = [torch.device(d) for d in _checks.check_concise(
        batch_size, devices, num_train, num_epochs, warmup_epochs, lr)]
    settings = dict(batch_size=batch_size, lr=lr, num_epochs=num_epochs,
                    num_train=num_train, num_test=num_test,
                    warmup_epochs=warmup_epochs)

    def train(report):
        if len(devices) == 1:
            with _threads_of(devices[0]):
                fit(net.to(devices[0]), net, devices[0], rank=0,
                    world_size=1, **settings, report=report)
        else:
            _run_processes(ddp_worker, net, devices, settings, report)
            net.to(devices[0]).eval()  # as `fit` leaves it on one device

    return _training.run_concise(devices, batch_size, num_epochs, num_train,
                               num_test, plot, train)


# Everything below this line is generated by `make lib` (tools/library.py)
# from the #@save functions of the English lessons (cells
# #@tab pytorch and #@tab all), in the order of LESSONS in
# tools/library.py. Edit the lessons, not this part: `make
# check-notebooks` fails on a difference.


# From notebooks/en/multiple-gpus.md
def lenet_params():
    """Fresh parameters of the lesson's LeNet, on the CPU: the weights
    of each layer drawn with standard deviation sqrt(2 / its inputs), the
    biases 0."""
    # Initialize model parameters: standard deviation sqrt(2 / inputs)
    def init(shape, num_inputs):
        return torch.randn(size=shape) * (2 / num_inputs) ** 0.5

    W1 = init((20, 1, 3, 3), num_inputs=1 * 3 * 3)
    b1 = torch.zeros(20)
    W2 = init((50, 20, 5, 5), num_inputs=20 * 5 * 5)
    b2 = torch.zeros(50)
    W3 = init((800, 128), num_inputs=800)
    b3 = torch.zeros(128)
    W4 = init((128, 10), num_inputs=128)
    b4 = torch.zeros(10)
    return [W1, b1, W2, b2, W3, b3, W4, b4]


def lenet(X, params):
    """The LeNet-style network of the lesson, written with functions so
    that its parameters can live on any device."""
    h1_conv = F.conv2d(input=X, weight=params[0], bias=params[1])
    h1_activation = F.relu(h1_conv)
    h1 = F.avg_pool2d(input=h1_activation, kernel_size=(2, 2), stride=(2, 2))
    h2_conv = F.conv2d(input=h1, weight=params[2], bias=params[3])
    h2_activation = F.relu(h2_conv)
    h2 = F.avg_pool2d(input=h2_activation, kernel_size=(2, 2), stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3_linear = h2 @ params[4] + params[5]
    h3 = F.relu(h3_linear)
    y_hat = h3 @ params[6] + params[7]
    return y_hat


def get_params(params, device):
    """Copies of `params` on `device` that record gradients
    (``requires_grad_``). Always copies (``copy=True``), even on the same
    device, so that every device owns its parameters."""
    new_params = [p.detach().to(device, copy=True) for p in params]
    for p in new_params:
        p.requires_grad_()
    return new_params


def allreduce(data):
    """Sum the tensors of `data` (one per device) in place, with autograd
    off: afterwards every one holds the elementwise sum. The first device
    gathers and adds up everything (``add_``), then sends the sum back
    (``copy_``): the book's simple version."""
    with torch.no_grad():
        for i in range(1, len(data)):
            data[0].add_(data[i].to(data[0].device))
        for i in range(1, len(data)):
            data[i].copy_(data[0])


def split_batch(X, y, devices):
    """Split the minibatch `X`, `y` into len(devices) nearly equal shards,
    shard i on devices[i]. (``d2l.split_batch`` first checks that X and y
    have the same length and that every device gets an example.)"""
    k = len(devices)
    return ([x.to(d, non_blocking=True)
             for x, d in zip(X.tensor_split(k), devices)],
            [t.to(d, non_blocking=True)
             for t, d in zip(y.tensor_split(k), devices)])


def forward_backward(X, y, params):
    """The loss of the shard `X`, `y` on the device of `params`, and its
    gradient, left in each parameter's ``.grad``."""
    loss(lenet(X, params), y).sum().backward()


# (#@tab all: the same code stands in the other backend, from the same cell)
def train_batch(X, y, device_params, *, devices, lr, reduce=allreduce):
    """One step of data-parallel minibatch SGD: split the batch, compute
    loss and gradient on every device, sum the gradients with `reduce`,
    and update every copy of the parameters."""
    X_shards, y_shards = split_batch(X, y, devices)
    # Every device computes the loss and gradient of its own shard. launch
    # queues the work on the device (on a CPU stand-in of PyTorch: on its
    # own worker thread; MXNet's engine queues it by itself), so the
    # devices compute at the same time
    jobs = [d2l.launch(device, forward_backward, X_shard, y_shard, params)
            for X_shard, y_shard, params, device in zip(
                X_shards, y_shards, device_params, devices)]
    for job in jobs:  # a stand-in's gradients exist once its job is done
        job.result()
    # Sum each gradient over all devices and give every device the sum
    for i in range(len(device_params[0])):
        reduce([params[i].grad for params in device_params])
    # Every device applies the same update to its own copy of the model
    for params in device_params:
        d2l.sgd(params, lr, X.shape[0])  # divide by the whole batch size


def evaluate_accuracy(net, data_iter, device=None):
    """The fraction of examples of `data_iter` that `net` classifies
    correctly, computed on `device` (default: the first GPU, else the
    CPU)."""
    if device is None:
        device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')
    correct, total = 0, 0
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            correct += (net(X).argmax(axis=1) == y).sum()  # stays on device
            total += len(y)
    return float(correct) / total


def train(num_gpus, batch_size, lr, *, num_epochs=10, num_train=None,
          num_test=None, params=None, reduce=allreduce, plot=True,
          devices=None):
    """Train the LeNet of the lesson from scratch with data parallelism on
    `num_gpus` devices (CPU stand-ins when there are fewer GPUs), plot the
    test accuracy per epoch, and return a `TrainResult` (test accuracy,
    seconds per epoch, devices). `num_train` and `num_test` keep only
    that many examples, for quick runs on a CPU. `devices`, a list of
    `num_gpus` devices, replaces ``d2l.try_devices(num_gpus)``."""
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        batch_size, num_train, num_test)
    devices = d2l.try_devices(num_gpus) if devices is None else devices
    params = lenet_params() if params is None else params
    # Copy the model parameters to every device
    device_params = [get_params(params, d) for d in devices]
    animator = d2l.Animator('epoch', 'test acc', xlim=[1, num_epochs],
                            ylim=[0, 1]) if plot else None
    seconds, accs, num_examples = [], [], 0
    for epoch in range(num_epochs):
        start = time.perf_counter()
        for X, y in train_iter:
            train_batch(X, y, device_params, devices=devices, lr=lr,
                        reduce=reduce)
            num_examples += len(y)
        for device in devices:  # wait once per epoch, not once per batch
            if torch.device(device).type == 'cuda':
                torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
        # Stop with a clear error if training has diverged (NaN or inf)
        d2l.check_finite(device_params[0], epoch, lr)
        # Evaluate on the first device only: simple, though the others idle
        accs.append(evaluate_accuracy(
            lambda x: lenet(x, device_params[0]), test_iter, devices[0]))
        if animator:
            animator.add(epoch + 1, (accs[-1],))
    result = d2l.TrainResult(
        test_acc=accs[-1], sec_per_epoch=sum(seconds) / num_epochs,
        devices=[str(d) for d in devices], num_epochs=num_epochs,
        num_examples=num_examples // num_epochs, test_accs=accs)
    print(result)
    return result


# From notebooks/en/communication-cost.md
def matmul_rate(device, n=1024, repeat=5):
    """FLOP/s of a product of two `n` x `n` matrices on `device`: 2 n**3
    FLOPs over the best of `repeat` timed products (the first also warms
    up). The values do not matter for the time; zeros will do."""
    A = torch.zeros((n, n), device=device)
    B = torch.zeros((n, n), device=device)
    timer = d2l.Timer()
    for _ in range(repeat):
        timer.start()
        d2l.launch(device, lambda: A @ B)
        d2l.synchronize([device])
        timer.stop()
    return 2 * n ** 3 / min(timer.times)


# From notebooks/en/multiple-gpus-concise.md
class Residual(nn.Module):
    """The residual block of ResNet: two 3x3 convolutions with batch
    normalization, plus a shortcut (a 1x1 convolution when the block
    changes the number of channels or the resolution)."""

    def __init__(self, in_channels, out_channels, use_1x1conv=False,
                 strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3,
                               padding=1, stride=strides)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3,
                               padding=1)
        self.conv3 = nn.Conv2d(in_channels, out_channels, kernel_size=1,
                               stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes=10, in_channels=1, width=64):
    """The book's ResNet-18 for small images: a 3x3 first convolution and
    no max-pooling, four stages of two residual blocks with `width`,
    2 `width`, 4 `width` and 8 `width` channels, global average pooling
    and a dense layer. The book uses ``width=64``; a CPU trains a thinner
    network (e.g. 8) in seconds rather than minutes."""
    def resnet_block(in_channels, out_channels, num_residuals,
                     first_block=False):
        blk = [Residual(in_channels, out_channels,
                        use_1x1conv=not first_block,
                        strides=1 if first_block else 2)]
        blk += [Residual(out_channels, out_channels)
                for _ in range(num_residuals - 1)]
        return nn.Sequential(*blk)

    return nn.Sequential(
        nn.Conv2d(in_channels, width, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(width), nn.ReLU(),
        resnet_block(width, width, 2, first_block=True),
        resnet_block(width, 2 * width, 2),
        resnet_block(2 * width, 4 * width, 2),
        resnet_block(4 * width, 8 * width, 2),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
        nn.Linear(8 * width, num_classes))


def fit(model, net, device, *, rank, world_size, batch_size, lr,
        num_epochs, num_train, num_test, warmup_epochs, report):
    """The training loop of `train_concise`, as every process runs it.

    `model` takes the steps: `net` itself on one device, or `net` wrapped
    in DistributedDataParallel. Process `rank` of `world_size` trains on
    its shard of each global batch of `batch_size` examples. Rank 0
    evaluates `net` after each epoch and calls ``report(epoch, test
    accuracy, seconds the epoch's training took)``."""
    X_train, y_train, _, _, _ = d2l.fashion_mnist_arrays(num_train, num_test)
    _, test_iter = d2l.load_data_fashion_mnist(256, num_train, num_test)
    steps_per_epoch = len(y_train) // batch_size
    total_steps = steps_per_epoch * num_epochs
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = nn.CrossEntropyLoss()  # the mean over this device's shard
    step = 0
    for epoch in range(num_epochs):
        model.train()
        timer = d2l.Timer()
        for idx in d2l.epoch_shards(len(y_train), batch_size, rank=rank,
                                    world_size=world_size, seed=epoch):
            X = torch.from_numpy(X_train[idx]).to(device)
            y = torch.from_numpy(y_train[idx]).to(device)
            for group in optimizer.param_groups:
                group['lr'] = d2l.learning_rate(step, lr,
                                                warmup_steps=warmup_steps,
                                                total_steps=total_steps)
            optimizer.zero_grad()
            # With DDP, backward also averages the gradients of all
            # processes, bucket by bucket, while it is still computing
            # (at width 8 there is one bucket, sent once backward is done)
            loss(model(X), y).backward()
            optimizer.step()
            step += 1
        d2l.synchronize([device])
        seconds = timer.stop()
        # Stop with a clear error if training has diverged (NaN or inf)
        d2l.check_finite(list(net.parameters()), epoch, lr)
        if rank == 0:  # net, not model: DDP's forward waits for the others
            net.eval()  # batch norm: use the running statistics
            report(epoch, d2l.evaluate_accuracy(net, test_iter, device),
                   seconds)


def ddp_worker(rank, world_size, port, net, devices, settings, queue):
    """Process `rank` of a `train_concise` run on several devices: take a
    copy of `net` of its own, join the process group (NCCL when every
    device is a GPU, else Gloo), wrap the copy in DistributedDataParallel,
    train with `fit`, and send the reports (and, from rank 0, the trained
    parameters) to the parent through `queue`."""
    device = devices[rank]
    cuda = device.type == 'cuda'
    if cuda:
        torch.cuda.set_device(device)
    else:  # the processes share the CPU cores
        torch.set_num_threads(max(1, torch.get_num_threads() // world_size))
    # `net` arrives in memory shared with the other processes: without a
    # copy of its own, each would update the same parameters on a CPU
    net = copy.deepcopy(net).to(device)
    backend = 'nccl' if all(d.type == 'cuda' for d in devices) else 'gloo'
    dist.init_process_group(backend, init_method=f'tcp://127.0.0.1:{port}',
                            rank=rank, world_size=world_size)
    try:
        # DDP copies rank 0's parameters and buffers to every process, and
        # by default copies the buffers (the running statistics of batch
        # norm) again before every forward pass
        model = DistributedDataParallel(
            net, device_ids=[device] if cuda else None)
        fit(model, net, device, rank=rank, world_size=world_size,
            **settings, report=lambda *r: queue.put(('epoch', *r)))
        if rank == 0:
            queue.put(('state', {k: v.detach().cpu().numpy()
                                 for k, v in net.state_dict().items()}))
    finally:
        dist.destroy_process_group()


# From notebooks/en/beyond-data-parallelism.md
def reduce_scatter(data):
    """Sum the arrays of `data` (one per device, same shape) and leave
    shard i of the sum on device i: the rows that ``np.array_split`` gives
    shard i, added up in the order of the devices (as `allreduce` adds).
    The inputs are not changed. (``d2l.reduce_scatter`` first checks
    that `data` is a list of arrays of one shape.)"""
    b = d2l.shard_bounds(len(data[0]), len(data))
    shards = []
    with torch.no_grad():
        for i, x in enumerate(data):  # device i adds up its rows
            device = x.device
            shard = data[0][b[i]:b[i + 1]].to(device, copy=True)
            for j in range(1, len(data)):
                shard += data[j][b[i]:b[i + 1]].to(device)
            shards.append(shard)
    return shards


def all_gather(shards):
    """Give every device the whole array: the shards (shard i on device i)
    put back together in order. The shards are not changed.
    (``d2l.all_gather`` first checks that they are arrays of one shape
    after the first axis.)"""
    with torch.no_grad():
        return [torch.cat([s.to(x.device) for s in shards])
                for x in shards]


def zero_replicas(flat, devices, stage):
    """What each device keeps between steps, for data parallelism
    (`stage` 0) or ZeRO stage 1, 2 or 3: the parameters, the gradients and
    Adam's m and v, whole or only the device's shard."""
    b = d2l.shard_bounds(len(flat), len(devices))
    replicas = []
    for i, device in enumerate(devices):
        n = b[i + 1] - b[i]  # the length of this device's shard
        params = flat[b[i]:b[i + 1]] if stage >= 3 else flat
        replicas.append({
            'params': params.to(device, copy=True),
            'grads': torch.zeros(n if stage >= 2 else len(flat),
                                 device=device),
            'm': torch.zeros(n if stage >= 1 else len(flat), device=device),
            'v': torch.zeros(n if stage >= 1 else len(flat), device=device)})
    return replicas


def zero_step(X, y, replicas, *, devices, lr, step, stage):
    """One step of Adam with data parallelism (`stage` 0) or ZeRO stage
    1, 2 or 3 on `devices`; `replicas` come from `zero_replicas`."""
    X_shards, y_shards = d2l.split_batch(X, y, devices)
    # 1. Each device needs all the parameters for its forward and backward
    # pass; with ZeRO-3 they are gathered for this step only
    if stage == 3:
        full = all_gather([r['params'] for r in replicas])
    else:
        full = [r['params'] for r in replicas]
    # 2. Each device computes the gradient on its part of the batch
    grads = []
    for X_i, y_i, p in zip(X_shards, y_shards, full):
        p = p.detach().requires_grad_()
        loss = d2l.loss(d2l.mlp(X_i, p), y_i).sum() / X.shape[0]
        grads.append(torch.autograd.grad(loss, p)[0])
    if stage == 0:  # 3. Everyone sums everything and updates everything
        d2l.allreduce(grads)
        for r, g in zip(replicas, grads):
            r['grads'][:] = g
            d2l.adam(r['params'], r['grads'], (r['m'], r['v']), lr=lr,
                     step=step)
        return
    # 3. ZeRO: device i sums only shard i of the gradient and updates only
    # shard i of the parameters, with its shard of m and v
    b = d2l.shard_bounds(len(full[0]), len(devices))
    for i, (r, g) in enumerate(zip(replicas, reduce_scatter(grads))):
        r['grads'][:] = grads[i] if stage == 1 else g  # ZeRO-1: whole
        mine = r['params'] if stage == 3 else r['params'][b[i]:b[i + 1]]
        d2l.adam(mine, g, (r['m'], r['v']), lr=lr, step=step)
    # 4. ZeRO-1 and 2: every device gets all the new parameters back
    if stage < 3:
        new = all_gather([r['params'][b[i]:b[i + 1]]
                          for i, r in enumerate(replicas)])
        for r, p in zip(replicas, new):
            r['params'][:] = p


def recomputation_step(X, y, flat, *, recompute):
    """One forward and backward pass of `d2l.mlp` and its mean loss on
    (`X`, `y`), from a copy of the parameters `flat`, with the MLP
    recomputed in the backward pass (`recompute`) or not. Returns (bytes
    of the tensors that autograd keeps for the backward pass, each block
    of memory once and the parameters not at all; forward passes of the
    MLP; seconds; the gradient of the parameters)."""
    calls = []

    def counted_mlp(X, params):  # notes each forward pass of the MLP
        calls.append(1)
        return d2l.mlp(X, params)

    params = flat.detach().clone().requires_grad_()
    kept = {}  # memory block -> bytes: a tensor saved twice counts once

    def pack(t):  # autograd calls it for each tensor that it keeps
        block = t.untyped_storage()
        if block.data_ptr() != params.untyped_storage().data_ptr():
            kept[block.data_ptr()] = block.nbytes()
        return t

    timer = d2l.Timer()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if recompute:  # keeps X; the backward pass runs the MLP again
            Y_hat = torch.utils.checkpoint.checkpoint(
                counted_mlp, X, params, use_reentrant=True)
        else:
            Y_hat = counted_mlp(X, params)
        loss = F.cross_entropy(Y_hat, y)
    loss.backward()
    return sum(kept.values()), len(calls), timer.stop(), params.grad


def split_columns(W, b, devices):
    """A linear layer split by columns (Megatron-LM): device i gets its
    columns of the weight `W` (inputs x outputs) and of the bias `b`."""
    c = d2l.shard_bounds(W.shape[1], len(devices))
    return [(W[:, c[i]:c[i + 1]].to(d, copy=True),
             b[c[i]:c[i + 1]].to(d, copy=True))
            for i, d in enumerate(devices)]


def split_rows(W, devices):
    """A linear layer split by rows: device i gets its rows of `W`."""
    r = d2l.shard_bounds(W.shape[0], len(devices))
    return [W[r[i]:r[i + 1]].to(d, copy=True)
            for i, d in enumerate(devices)]


def tensor_parallel_mlp(X, columns, rows, *, b2):
    """relu(X W1 + b1) W2 + b2 with W1, b1 split by columns (`columns`)
    and W2 by rows (`rows`): each device computes its columns of the
    hidden layer and a partial sum of the output; one allreduce adds the
    partial sums. Returns the output on every device."""
    X, partial = X.reshape(X.shape[0], -1), []
    for (W1_i, b1_i), W2_i in zip(columns, rows):
        X_i = X.to(W1_i.device)
        H_i = torch.relu(X_i @ W1_i + b1_i)  # its hidden columns
        partial.append(H_i @ W2_i)  # its share of the output
    d2l.allreduce(partial)
    return [Y + b2.to(Y.device) for Y in partial]


# The input checks of the functions above (CHECKED in tools/library.py):
# a wrong call of d2l.<name> says what to do
allreduce = _checks.checked(allreduce, check_allreduce)
split_batch = _checks.checked(split_batch, _checks.split_batch_input)
train_batch = _checks.checked(train_batch, _checks.train_batch_input)
train = _checks.checked(train, _checks.train_input)
reduce_scatter = _checks.checked(
    reduce_scatter, _checks.collective(check_collective, 'reduce_scatter'))
all_gather = _checks.checked(
    all_gather, _checks.collective(check_collective, 'all_gather', False))
