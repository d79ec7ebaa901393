"""d2lpar for MXNet: ``from d2lpar import mxnet as d2l``.

The same public names, with the same signatures, as ``d2lpar.torch``.
Everything runs on a CPU-only machine: where a lesson asks for more GPUs
than there are, `try_devices` hands out the CPU contexts ``cpu(0)``,
``cpu(1)``, ... as stand-ins (MXNet runs each on its own engine thread)
and says so once.
"""

from d2lpar._mxnet import STAND_IN_THREADS  # noqa: F401 (before MXNet)

import mxnet as mx  # noqa: E402,F401 (the lessons' code uses it)
from mxnet import autograd, gluon, np, npx  # noqa: E402
from mxnet.gluon import nn  # noqa: E402,F401

from d2lpar import (  # noqa: E402
    _backend, api as _api, checks as _checks, collectives as _collectives,
    training as _training)
from d2lpar._backend import *  # noqa: E402,F401,F403 (shared names)
from d2lpar._mxnet.devices import (  # noqa: E402,F401 (framework glue)
    Benchmark, copy_bandwidth, cpu, gpu, launch, load_data_fashion_mnist,
    measure_allreduce, num_gpus, products_that_fit, synchronize,
    try_all_gpus, try_devices, try_gpu)
from d2lpar._mxnet.arrays import (  # noqa: E402,F401 (for #@tab all)
    astype, concat, device_of, grad_of, no_grad, relu, to_device, zeros)
from d2lpar._mxnet.arrays import (  # noqa: E402,F401 (_backend's hooks)
    _ARRAY, _FRAMEWORK, _all_finite, _copy_into, _copy_like, _device_of,
    _flat, _memory, _no_grad)
from d2lpar._mxnet.models import (  # noqa: E402,F401
    MLP_SHAPES, adam, gpipe_step, held_bytes, lenet_params, loss, mlp,
    mlp_params, pipeline_params, sgd, stage_forward)
from d2lpar._mxnet.timeline import Timeline  # noqa: E402

npx.set_np()

__all__ = _api.SHARED + _api.BACKEND
d2l = _backend.prepare(__name__)  # fonts; the name the lessons' code uses
(check_allreduce, check_collective, check_finite, ring_allreduce,
 parameter_drift, train_distributed,
 distributed_commands) = _backend.shared_functions(__name__)


# --------------------------------------------------------------------------
# Data parallelism from scratch
# --------------------------------------------------------------------------
# The sum of each chunk, one buffer per (device, dtype, chunk), kept from
# call to call: a fresh 16 MB buffer comes from the kernel and is faulted
# in page by page (MXNet's CPU memory has no pool).
_chunk_sums = {}


def _chunk_sum(device, dtype, c, n):
    key = (str(device), str(dtype), c)
    if key not in _chunk_sums or _chunk_sums[key].shape[0] < n:
        _chunk_sums[key] = mx.nd.empty((n,), ctx=device, dtype=dtype)
    return _chunk_sums[key][:n]


def direct_allreduce(data):
    """Like `allreduce`, but every device adds up a chunk of its own: it
    reads chunk i of every array straight from its device (a
    reduce-scatter), then sends its sum straight to every device (an
    all-gather). Each device sends 2(k-1)/k of the data, as in the ring.

    MXNet's engine orders operators by the arrays they read and write, not
    by the slices: two chunks of one array count as the same array. In the
    ring, stand-in i+1 reads the array that stand-in i is writing, so its
    steps ran one after the other (one core busy of two). Here the chunk
    sums go into buffers of their own, so the k sums only read the arrays
    and run at once, and so do the k all-gathers, which each write the
    array of one device."""
    check_allreduce(data)
    k = len(data)
    if k == 1:
        return
    flats = [_flat(x).as_nd_ndarray() for x in data]
    b = _collectives.chunk_bounds(flats[0].shape[0], k)
    chunks = [c for c in range(k) if b[c] < b[c + 1]]  # n < k: some empty
    sums = {}
    for c in chunks:  # device c's own piece first: an MXNet operator runs
        # on the engine thread of its first input's device
        parts = [_copy_like(flats[(c + i) % k][b[c]:b[c + 1]], flats[c])
                 for i in range(k)]
        sums[c] = _chunk_sum(data[c].ctx, data[c].dtype, c, b[c + 1] - b[c])
        mx.nd.add_n(*parts, out=sums[c])
    for c in chunks:
        for i in range(k):
            _copy_into(sums[c], flats[(c + i) % k][b[c]:b[c + 1]])


def _max_abs_diff(a, b):
    return float(np.abs(a - b.as_in_ctx(a.ctx)).max())


def train_step_timeline(X, y, device_params, *, devices, lr, reduce=None):
    """Run one step of `train_batch` (gradients summed with `reduce`,
    `allreduce` by default), the same computation in the same order, and
    return its `Timeline`, with the results of each stage
    (split, forward and backward, allreduce, update) watched on the device
    that computes them."""
    reduce = allreduce if reduce is None else reduce
    check_replicas(device_params, devices)
    with Timeline() as timeline:
        X_shards, y_shards = split_batch(X, y, devices)
        timeline.watch(X_shards, 'split', 'copy')
        for X_shard, y_shard, params, device in zip(
                X_shards, y_shards, device_params, devices):
            launch(device, forward_backward, X_shard, y_shard, params)
            timeline.watch([p.grad for p in params], 'forward_backward')
        for i in range(len(device_params[0])):
            reduce([params[i].grad for params in device_params])
        for params in device_params:
            timeline.watch([p.grad for p in params], 'allreduce', 'copy')
            sgd(params, lr, X.shape[0])
            timeline.watch(params, 'update')
    return timeline


# --------------------------------------------------------------------------
# Concise implementation: ResNet-18 with a Gluon Trainer over contexts
# --------------------------------------------------------------------------
def train_concise(net, devices, *, batch_size, lr, num_epochs=10,
                  num_train=None, num_test=None, warmup_epochs=0,
                  plot=True):
    """Train the classifier `net` on Fashion-MNIST with data parallelism
    over `devices`, with the framework's own tools: a copy of the network
    on every context and a Gluon `Trainer` whose KVStore sums the
    gradients. `batch_size` is the global batch, cut into one shard per
    device; the learning rate warms up linearly from ``lr /
    warmup_steps`` over `warmup_epochs` epochs, then decays to 0 (cosine).
    Plots the test accuracy per epoch, leaves the trained parameters in
    `net` (the same on all `devices`; batch normalization's running
    statistics differ between devices, so evaluate on ``devices[0]``, as
    the reported accuracies are), and returns a `TrainResult`."""
    devices = _checks.check_concise(batch_size, devices, num_train,
                                    num_epochs, warmup_epochs, lr)

    def train(report):
        net.collect_params().reset_ctx(devices)  # a copy on every device
        net.hybridize()
        fit(net, devices, batch_size=batch_size, lr=lr,
            num_epochs=num_epochs, num_train=num_train, num_test=num_test,
            warmup_epochs=warmup_epochs, report=report)

    return _training.run_concise(devices, batch_size, num_epochs, num_train,
                               num_test, plot, train)


# Everything below this line is generated by `python3 tools/notebooks.py
# build` from the #@save functions of the English lessons (cells
# #@tab mxnet), in the order of LESSONS in
# tools/library.py. Edit the lessons, not this part: `make
# check-notebooks` fails on a difference.


# From notebooks/en/multiple-gpus.md
def lenet(X, params):
    """The LeNet-style network of the lesson, written with functions so
    that its parameters can live on any device."""
    h1_conv = npx.convolution(data=X, weight=params[0], bias=params[1],
                              kernel=(3, 3), num_filter=20)
    h1_activation = npx.relu(h1_conv)
    h1 = npx.pooling(data=h1_activation, pool_type='avg', kernel=(2, 2),
                     stride=(2, 2))
    h2_conv = npx.convolution(data=h1, weight=params[2], bias=params[3],
                              kernel=(5, 5), num_filter=50)
    h2_activation = npx.relu(h2_conv)
    h2 = npx.pooling(data=h2_activation, pool_type='avg', kernel=(2, 2),
                     stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3_linear = np.dot(h2, params[4]) + params[5]
    h3 = npx.relu(h3_linear)
    y_hat = np.dot(h3, params[6]) + params[7]
    return y_hat


def get_params(params, device):
    """A copy of `params` on `device` (``copyto`` copies even on the same
    device, so that every device owns its parameters), each with a
    gradient buffer (``attach_grad``)."""
    new_params = [p.copyto(device) for p in params]
    for p in new_params:
        p.attach_grad()
    return new_params


def allreduce(data):
    """Sum the arrays of `data` (one per device) in place: afterwards every
    one holds the elementwise sum. The first device gathers and adds up
    everything, then sends the sum back (the book's simple version)."""
    d2l.check_allreduce(data)
    for i in range(1, len(data)):
        np.add(data[0], data[i].as_in_ctx(data[0].ctx), out=data[0])
    for i in range(1, len(data)):
        data[0].copyto(data[i])


def split_batch(X, y, devices):
    """Split the minibatch `X`, `y` into len(devices) nearly equal shards,
    shard i on devices[i]. A ValueError if X and y differ in length or
    there are fewer examples than devices."""
    devices = d2l.check_split(len(X), len(y), devices)
    return (gluon.utils.split_and_load(X, devices, even_split=False),
            gluon.utils.split_and_load(y, devices, even_split=False))


def forward_backward(X, y, params):
    """The loss of the shard `X`, `y` on the device of `params`, and its
    gradient, left in each parameter's ``.grad``."""
    with autograd.record():
        l = loss(lenet(X, params), y)
    l.backward()


# From notebooks/en/multiple-gpus-concise.md
class Residual(nn.HybridBlock):
    """The residual block of ResNet: two 3x3 convolutions with batch
    normalization, plus a shortcut (a 1x1 convolution when the block
    changes the number of channels or the resolution)."""

    def __init__(self, in_channels, out_channels, use_1x1conv=False,
                 strides=1, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(out_channels, kernel_size=3, padding=1,
                               strides=strides, in_channels=in_channels)
        self.conv2 = nn.Conv2D(out_channels, kernel_size=3, padding=1,
                               in_channels=out_channels)
        self.conv3 = nn.Conv2D(out_channels, kernel_size=1, strides=strides,
                               in_channels=in_channels) if use_1x1conv else None
        self.bn1 = nn.BatchNorm(in_channels=out_channels)
        self.bn2 = nn.BatchNorm(in_channels=out_channels)

    def hybrid_forward(self, F, X):
        Y = F.npx.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.npx.relu(Y + X)


def resnet18(num_classes=10, in_channels=1, width=64):
    """The book's ResNet-18 for small images: a 3x3 first convolution and
    no max-pooling, four stages of two residual blocks with `width`,
    2 `width`, 4 `width` and 8 `width` channels, global average pooling
    and a dense layer, initialized (Xavier) on the CPU. The book uses
    ``width=64``; a CPU trains a thinner network (e.g. 8) in seconds
    rather than minutes."""
    def resnet_block(in_channels, out_channels, num_residuals,
                     first_block=False):
        blk = nn.HybridSequential()
        blk.add(Residual(in_channels, out_channels,
                         use_1x1conv=not first_block,
                         strides=1 if first_block else 2))
        for _ in range(num_residuals - 1):
            blk.add(Residual(out_channels, out_channels))
        return blk

    net = nn.HybridSequential()
    net.add(nn.Conv2D(width, kernel_size=3, strides=1, padding=1,
                      in_channels=in_channels),
            nn.BatchNorm(in_channels=width), nn.Activation('relu'),
            resnet_block(width, width, 2, first_block=True),
            resnet_block(width, 2 * width, 2),
            resnet_block(2 * width, 4 * width, 2),
            resnet_block(4 * width, 8 * width, 2),
            nn.GlobalAvgPool2D(), nn.Dense(num_classes, in_units=8 * width))
    net.initialize(mx.init.Xavier(), ctx=d2l.cpu())
    return net


def fit(net, devices, *, batch_size, lr, num_epochs, num_train,
        num_test, warmup_epochs, report):
    """The training loop of `train_concise`. Each global batch of
    `batch_size` examples is cut into one shard per device; each device
    computes the loss of its shard and its gradient; the `Trainer` sums
    the gradients of all devices (its KVStore) and updates every copy of
    the parameters. After each epoch, ``report(epoch, test accuracy,
    seconds the epoch's training took)``."""
    X_train, y_train, _, _, _ = d2l.fashion_mnist_arrays(num_train, num_test)
    _, test_iter = d2l.load_data_fashion_mnist(256, num_train, num_test)
    steps_per_epoch = len(y_train) // batch_size
    total_steps = steps_per_epoch * num_epochs
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': lr})
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    step = 0
    for epoch in range(num_epochs):
        timer = d2l.Timer()
        for idx in d2l.epoch_shards(len(y_train), batch_size, seed=epoch):
            X_shards, y_shards = d2l.split_batch(
                np.array(X_train[idx]), np.array(y_train[idx]), devices)
            trainer.set_learning_rate(d2l.learning_rate(
                step, lr, warmup_steps=warmup_steps, total_steps=total_steps))
            with autograd.record():
                ls = [loss(net(X_shard), y_shard)
                      for X_shard, y_shard in zip(X_shards, y_shards)]
            for l in ls:
                l.backward()
            trainer.step(batch_size)  # sum over devices, divide by batch
            step += 1
        npx.waitall()
        seconds = timer.stop()
        # Stop with a clear error if training has diverged (NaN or inf)
        d2l.check_finite([p.data(devices[0]) for p in
                          net.collect_params().values()], epoch, lr)
        # Outside autograd.record, batch norm uses its running statistics
        report(epoch, d2l.evaluate_accuracy(net, test_iter, devices[0]),
               seconds)


# The functions of the cells #@tab all, the same for both backends:
# generated once into d2lpar/_shared_lessons.py and run here, in this
# module's namespace, so that their names are this backend's
_backend.run_shared_lessons(globals())
