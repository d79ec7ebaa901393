"""Lesson 5's tensor parallelism with PyTorch's own API, in two processes.

The lesson calls `run(X, y, flat)`, which starts this module as a script
under torchrun on 127.0.0.1::

    python -m torch.distributed.run --nproc-per-node 2 \\
        -m d2lpar.distributed.tensor_parallel --inputs IN.npz --out OUT

Each process builds the MLP of ``d2l.mlp`` (784 -> 256 -> 10) with the
values in IN.npz, and `parallelize_module` splits it over a `DeviceMesh`
of the processes (gloo on the CPU): the first layer by columns
(`ColwiseParallel`), the second by rows (`RowwiseParallel`), as the
lesson's `tensor_parallel_mlp` does by hand. Then one forward and one
backward pass of the batch in IN.npz. Rank 0 writes OUT/result.npz (the
output, the loss, the gradients gathered whole) and OUT/result.json (the
shape of each process's part of every parameter, and the allreduces
counted in the forward and in the backward pass).
"""
import argparse
import json
import os
import tempfile

import numpy as np

from d2lpar.distributed.ddp_launch import run_module
from d2lpar.i18n import N_
from d2lpar.distributed.scripts import leave_now, write_json, write_npz

SHAPES = {'W1': (784, 256), 'b1': (256,), 'W2': (256, 10), 'b2': (10,)}


def _numpy(a):
    """A NumPy copy of a tensor of PyTorch (or of anything array-like)."""
    return a.detach().cpu().numpy() if hasattr(a, 'detach') else np.asarray(a)


def run(X, y, flat, num_processes=2, timeout=120):
    """One forward and backward pass of the lesson's MLP (its values in
    the flat vector `flat`) on the batch `X`, `y`, split over
    `num_processes` processes with PyTorch's tensor parallelism, on the
    CPU. Returns a dict: 'output' (the same on every process), 'loss'
    (the mean cross-entropy), 'grads' ({'W1', 'b1', 'W2', 'b2', 'X'}, in
    the shapes of ``d2l.mlp``), 'shards' (the shape of each process's part
    of each parameter) and 'allreduces' ({'forward': n, 'backward': n})."""
    with tempfile.TemporaryDirectory(prefix='d2lpar-tp-') as out:
        X = _numpy(X).astype(np.float32)
        np.savez(os.path.join(out, 'inputs.npz'),
                 X=X.reshape(len(X), -1), y=_numpy(y).astype(np.int64),
                 flat=_numpy(flat).astype(np.float32))
        run_module('d2lpar.distributed.tensor_parallel', [
            '--inputs', os.path.join(out, 'inputs.npz'), '--out', out], out,
            num_processes, timeout,
            N_('The tensor-parallel run in {n} processes failed ({code}): '
               'stopped all its processes. End of its log:'))
        with np.load(os.path.join(out, 'result.npz')) as arrays:
            result = {'output': arrays['output'],
                      'loss': float(arrays['loss']),
                      'grads': {n: arrays[n] for n in [*SHAPES, 'X']}}
        with open(os.path.join(out, 'result.json')) as f:
            result.update(json.load(f))
    return result


# --------------------------------------------------------------------------
# The script that torchrun runs in every process
# --------------------------------------------------------------------------
def mlp_module(flat):
    """The MLP of ``d2l.mlp`` as two ``nn.Linear`` layers, with the values
    of the flat vector `flat`. ``nn.Linear`` keeps its weight as
    (outputs, inputs), the transpose of the lesson's W1 and W2."""
    import torch
    from torch import nn
    params, start = {}, 0
    for name, shape in SHAPES.items():
        size = int(np.prod(shape))
        params[name] = flat[start:start + size].reshape(shape)
        start += size
    net = nn.Sequential()
    net.add_module('hidden', nn.Linear(784, 256))
    net.add_module('relu', nn.ReLU())
    net.add_module('output', nn.Linear(256, 10))
    with torch.no_grad():
        net.hidden.weight.copy_(params['W1'].T)
        net.hidden.bias.copy_(params['b1'])
        net.output.weight.copy_(params['W2'].T)
        net.output.bias.copy_(params['b2'])
    return net


def count_allreduces(comm_mode):
    """The allreduces that a `CommDebugMode` saw."""
    return sum(n for op, n in comm_mode.get_comm_counts().items()
               if 'all_reduce' in str(op))


def main():
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)
    from torch.nn import functional as F

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--inputs', required=True)
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh('cpu', (world,))  # one process per device
    with np.load(args.inputs) as data:
        X = torch.from_numpy(data['X']).requires_grad_()
        y = torch.from_numpy(data['y'])
        flat = torch.from_numpy(data['flat'])
    # Every process builds the whole MLP; parallelize_module keeps only
    # its columns of the first layer and its rows of the second
    net = parallelize_module(mlp_module(flat), mesh, {
        'hidden': ColwiseParallel(), 'output': RowwiseParallel()})
    with CommDebugMode() as forward:
        Y = net(X)  # the whole output, the same on every process
    loss = F.cross_entropy(Y, y)
    with CommDebugMode() as backward:
        loss.backward()
    # Each process holds a shard of each gradient: gather them whole
    grads = {'W1': net.hidden.weight.grad.full_tensor().T,
             'b1': net.hidden.bias.grad.full_tensor(),
             'W2': net.output.weight.grad.full_tensor().T,
             'b2': net.output.bias.grad.full_tensor(), 'X': X.grad}
    local = [tuple(p.to_local().shape) for p in net.parameters()]
    everyone = [None] * world
    dist.all_gather_object(everyone, local)
    if rank == 0:
        arrays = {n: g.detach().numpy() for n, g in grads.items()}
        write_npz(os.path.join(args.out, 'result.npz'),
                  dict(output=Y.detach().numpy(), loss=loss.detach().numpy(),
                       **arrays))
        # In the lesson's layout: W1 and W2 as (inputs, outputs)
        shards = {name: [list(reversed(s[i])) if name[0] == 'W'
                         else list(s[i]) for s in everyone]
                  for i, name in enumerate(SHAPES)}
        # Written last: the launcher takes it as the sign of a whole run
        write_json(os.path.join(args.out, 'result.json'), {
            'shards': shards, 'allreduces': {
                'forward': count_allreduces(forward),
                'backward': count_allreduces(backward)}})
    dist.barrier()  # nobody leaves before the results are written
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
    leave_now()  # not the interpreter's normal exit (see scripts.py)
