"""One adapter per framework: a d2lpar backend module plus the few
framework-specific operations the tests need, so that every test is
written once and runs for both (the `backend` fixture of conftest.py).

Attribute access falls through to the module: ``backend.allreduce`` is
``d2lpar.<name>.allreduce``. A test that needs something the two
frameworks do differently asks its adapter, here, rather than branching
on the framework's name.
"""
import importlib
import json
import os

import numpy as np

BACKENDS = ('torch', 'mxnet')


class Backend:
    """What both adapters share: the module, and attribute fall-through."""
    name = None

    def __init__(self):
        self.module = importlib.import_module(f'd2lpar.{self.name}')
        self._fw = importlib.import_module(self.name)

    def __getattr__(self, attr):
        return getattr(self.module, attr)

    def __repr__(self):
        return f'<backend {self.name}>'

    def view(self, x):
        """Another array object that shares the memory of `x`."""
        return x.detach()  # both frameworks: a new object, the same memory


class TorchBackend(Backend):
    name = 'torch'
    # A transpose is a strided view (ring_allreduce refuses it); the
    # profiler records operators (aten::mm, aten::to), not our labels
    transpose_is_a_view = True
    failure_messages = ('A training process failed',
                        'shapes cannot be multiplied')

    # -- arrays -----------------------------------------------------------
    def array(self, a, device=None):
        """A framework array with the values and dtype of NumPy `a`."""
        a = np.asarray(a)
        device = self.module.cpu() if device is None else device
        return self._fw.tensor(a, device=device)

    def full(self, n, value, device):
        """A float32 vector of `n` copies of `value` on `device`, made by an
        operation of the framework (in MXNet: queued, not yet run)."""
        return self._fw.full((n,), value, device=device)

    def numpy(self, x):
        """A NumPy copy of framework array `x` (waits for it)."""
        return x.detach().cpu().numpy()

    def matmul(self, x, y):
        return x @ y

    def copy_to_cpu(self, x):
        """A copy of `x` in the CPU's memory, made by the framework."""
        return x.to('cpu', copy=True)

    def wait(self, x):
        """Wait until `x` is computed (PyTorch: it is, once returned)."""

    def attach_grad(self, p, grad_req='write'):
        p.requires_grad_()

    def copy_with_grad(self, p):
        """A copy of `p` whose gradient the framework computes."""
        return p.detach().clone().requires_grad_()

    def backward(self, loss_of):
        """Record ``loss_of()`` and compute its gradients."""
        loss_of().backward()

    # -- devices ----------------------------------------------------------
    def is_on(self, x, device):
        """Whether array `x` lives on `device`. A PyTorch CPU stand-in
        (cpu:i) keeps its tensors in the CPU's memory, device 'cpu'."""
        device = self._fw.device(device)
        return x.device == (self._fw.device('cpu')
                            if device.type == 'cpu' else device)

    def device_of(self, x):
        return x.device

    def is_cpu(self, device):
        return self._fw.device(device).type == 'cpu'

    def gpu_device(self, i):
        """The device object of GPU `i`, made by the framework itself (not
        by d2lpar): creating it allocates nothing and needs no GPU."""
        return self._fw.device('cuda', i)

    def named_devices(self):
        """Two devices that split_batch can place shards on, and whose
        placement can be seen: the `meta` device has no data but a name
        (PyTorch's CPU stand-ins all say 'cpu')."""
        return [self._fw.device('meta')] * 2

    def framework_gpus(self):
        """How many GPUs the framework itself reports."""
        return self._fw.cuda.device_count()

    def simulate_gpus(self, monkeypatch, n):
        """Make the framework report `n` GPUs for the rest of the test.
        Only the count is faked; see the `gpus` fixture."""
        monkeypatch.setattr(self._fw.cuda, 'device_count', lambda: n)
        monkeypatch.setattr(self._fw.cuda, 'is_available', lambda: n > 0)

    def simulate_gpu_memory(self, monkeypatch, info):
        """Make the framework ask ``info(i)`` for the (free, total) bytes
        of GPU i."""
        monkeypatch.setattr(self._fw.cuda, 'mem_get_info',
                            lambda device=None: info(
                                self._fw.device(device).index))

    def stand_ins(self, k):
        """What try_devices(k) must return when there are fewer than k
        GPUs."""
        return [self._fw.device('cpu', i) for i in range(k)]

    def sender(self, src, data):
        """Which array of `data` the chunk `src` is a piece of (stand-in
        tensors all say 'cpu': by their memory)."""
        ends = [(x.data_ptr(), x.data_ptr() + x.numel() * x.element_size())
                for x in data]
        return next(i for i, (lo, hi) in enumerate(ends)
                    if lo <= src.data_ptr() < hi)

    # -- random numbers ---------------------------------------------------
    def seed(self, n):
        """Seed the framework RNG that lenet_params draws from."""
        self._fw.manual_seed(n)

    def seed_np(self, n):
        """Seed the RNG that mlp_params and pipeline_params draw from."""
        self._fw.manual_seed(n)

    # -- networks (lesson 3) ----------------------------------------------
    def linear_net(self):
        """784 inputs to 10 outputs, no batch normalization, drawn from
        the framework's RNG."""
        from torch import nn
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))

    def failing_net(self):
        """A network that cannot take the images (10 inputs, not 784), and
        the error train_concise raises with it (in a worker process)."""
        from torch import nn
        return nn.Sequential(nn.Flatten(), nn.Linear(10, 10)), RuntimeError

    def trainable(self, net):
        """NumPy copies of the trainable parameters of `net`."""
        return [p.detach().numpy().copy() for p in net.parameters()]

    def output_shape(self, net, X):
        """The shape of ``net(X)`` for NumPy `X`."""
        return net(self._fw.from_numpy(X)).shape

    def in_training_mode(self, net):
        return net.training

    def fit_on(self, net, device, **args):
        """Lesson 3's `fit` on one device, in this process."""
        return self.module.fit(net, net, device, rank=0, world_size=1,
                               **args)

    def recorder(self, record):
        """A linear classifier that calls ``record(X)`` with the NumPy
        images of every training step."""
        from torch import nn

        class Recorder(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(784, 10)

            def forward(self, X):
                if self.training:
                    record(X.detach().numpy())
                return self.linear(X.reshape(len(X), -1))

        return Recorder()

    # -- scripts ----------------------------------------------------------
    def checkpoint_params(self, folder):
        """{name: NumPy array}: the model in ddp_train's checkpoint in
        `folder`."""
        import torch
        state = torch.load(os.path.join(folder, 'checkpoint.pt'),
                           weights_only=True)
        return {k: v.numpy() for k, v in state['model'].items()}


class MXNetBackend(Backend):
    name = 'mxnet'
    transpose_is_a_view = False  # MXNet's .T is a contiguous copy
    failure_messages = ('Shape inconsistent',)

    # -- arrays -----------------------------------------------------------
    def array(self, a, device=None):
        a = np.asarray(a)
        device = self.module.cpu() if device is None else device
        return self._fw.np.array(a, ctx=device, dtype=a.dtype)

    def full(self, n, value, device):
        return self._fw.np.full(n, value, ctx=device, dtype='float32')

    def numpy(self, x):
        return x.asnumpy()

    def matmul(self, x, y):
        return self._fw.np.dot(x, y)

    def copy_to_cpu(self, x):
        return x.copyto(self.module.cpu())

    def wait(self, x):
        """Wait until the engine has computed `x`."""
        x.wait_to_read()

    def attach_grad(self, p, grad_req='write'):
        p.attach_grad(grad_req=grad_req)

    def copy_with_grad(self, p):
        copy = p.copy()
        copy.attach_grad()
        return copy

    def backward(self, loss_of):
        from mxnet import autograd
        with autograd.record():
            loss = loss_of()
        loss.backward()

    # -- devices ----------------------------------------------------------
    def is_on(self, x, device):
        return x.ctx == device

    def device_of(self, x):
        return x.ctx

    def is_cpu(self, device):
        return device.device_type == 'cpu'

    def gpu_device(self, i):
        return self._fw.npx.gpu(i)

    def named_devices(self):
        return [self._fw.npx.cpu(5), self._fw.npx.cpu(6)]

    def framework_gpus(self):
        return self._fw.context.num_gpus()

    def simulate_gpus(self, monkeypatch, n):
        # npx.num_gpus is context.num_gpus, bound in two modules
        monkeypatch.setattr(self._fw.npx, 'num_gpus', lambda: n)
        monkeypatch.setattr(self._fw.context, 'num_gpus', lambda: n)

    def simulate_gpu_memory(self, monkeypatch, info):
        monkeypatch.setattr(self._fw.context, 'gpu_memory_info',
                            lambda device_id=0: info(device_id))

    def stand_ins(self, k):
        return [self._fw.npx.cpu(i) for i in range(k)]

    def sender(self, src, data):
        return [x.ctx for x in data].index(src.ctx)

    # -- random numbers ---------------------------------------------------
    def seed(self, n):
        self._fw.random.seed(n)

    def seed_np(self, n):
        self._fw.npx.random.seed(n)

    # -- networks (lesson 3) ----------------------------------------------
    def linear_net(self):
        from mxnet import init
        from mxnet.gluon import nn
        net = nn.HybridSequential()
        net.add(nn.Dense(10, in_units=784))
        net.initialize(init.Normal(0.01), ctx=self.module.cpu())
        return net

    def failing_net(self):
        """(The error comes from this process.)"""
        from mxnet.base import MXNetError
        from mxnet.gluon import nn
        net = nn.HybridSequential()
        net.add(nn.Dense(10, in_units=10, flatten=True))
        net.initialize()
        return net, MXNetError

    def trainable(self, net):
        return [p.data(p.list_ctx()[0]).asnumpy() for p in
                net.collect_params().values() if p.grad_req != 'null']

    def output_shape(self, net, X):
        return net(self._fw.np.array(X)).shape

    def in_training_mode(self, net):
        return False  # Gluon has no mode: autograd.record decides

    def fit_on(self, net, device, **args):
        return self.module.fit(net, [device], **args)

    def recorder(self, record):
        from mxnet import autograd, gluon

        class Recorder(gluon.nn.Block):
            def __init__(self):
                super().__init__()
                self.linear = gluon.nn.Dense(10)

            def forward(self, X):
                if autograd.is_training():
                    record(X.asnumpy())
                return self.linear(X)

        net = Recorder()
        net.initialize()
        return net

    # -- scripts ----------------------------------------------------------
    def checkpoint_params(self, folder):
        """{name: NumPy array}: the parameters in kvstore_train's
        checkpoint in `folder` (checkpoint.json names their file)."""
        with open(os.path.join(folder, 'checkpoint.json')) as f:
            name = json.load(f)['params']
        self._fw.npx.set_np()
        return {k: v.asnumpy()
                for k, v in self._fw.npx.load(os.path.join(folder,
                                                           name)).items()}


ADAPTERS = {'torch': TorchBackend, 'mxnet': MXNetBackend}
_backends = {}


def get_backend(name):
    """The adapter of framework `name` ('torch' or 'mxnet'), made once."""
    if name not in _backends:
        _backends[name] = ADAPTERS[name]()
    return _backends[name]
