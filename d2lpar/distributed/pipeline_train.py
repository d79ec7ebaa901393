"""Lesson 5's pipeline in two processes, run by ``d2lpar.distributed.ddp_train
--pipeline``: the MLP of ``pipeline_params`` cut into two stages, one per
process, trained with the GPipe or the 1F1B schedule of
``torch.distributed.pipelining`` (``--schedule``; see the docstring of
d2lpar.distributed.ddp_train). Each process counts the micro-batches whose
activations its stage holds at once (`InFlight`).
"""
import os
import socket
import time

import torch
import torch.distributed as dist
from torch import nn

from d2lpar.distributed.ddp_practices import evaluate, make_optimizer
from d2lpar.i18n import _, error_message
from d2lpar.distributed.scripts import shards_of_epoch, write_json, write_npz
from d2lpar.training import learning_rate


class Stage(nn.Module):
    """One pipeline stage of lesson 5's MLP: `params` are (weight, bias)
    pairs with weights of shape (inputs, outputs), each layer followed by
    a ReLU except the very last layer of the model (``stage_forward``)."""

    def __init__(self, params, last):
        super().__init__()
        self.params = nn.ParameterList(nn.Parameter(p) for p in params)
        self.last = last

    def forward(self, X):
        X = X.reshape(X.shape[0], -1)
        for i in range(0, len(self.params), 2):
            X = X @ self.params[i] + self.params[i + 1]
            if not (self.last and i == len(self.params) - 2):
                X = torch.relu(X)
        return X


def pipeline_stages(seed, width=512):
    """The two stages of lesson 5's pipeline MLP, with the values that
    ``pipeline_params()`` draws after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)

    def layer(n_in, n_out):
        return [torch.randn(n_in, n_out) * (2 / n_in) ** 0.5,
                torch.zeros(n_out)]
    params = [layer(784, width) + layer(width, width),
              layer(width, width) + layer(width, 10)]
    return [Stage(params[0], False), Stage(params[1], True)]


class InFlight:
    """Counts, in the real run, the micro-batches whose activations a
    stage holds: one more when its forward pass has recorded them, one
    less when their backward pass starts (the gradient of the stage's
    output arrives; the activations are freed by the end of it). `most`
    is the largest count seen (`train_pipeline` counts from step 2)."""

    def __init__(self, module):
        self.now, self.most = 0, 0
        module.register_forward_hook(self.forward_done)

    def forward_done(self, module, inputs, output):
        if not output.requires_grad:  # a pass that keeps nothing (no_grad)
            return
        self.now += 1
        self.most = max(self.most, self.now)
        output.register_hook(self.backward_starts)

    def backward_starts(self, grad):
        self.now -= 1


def gather_stages(stage):
    """{'s.i': NumPy array}: parameter i of stage s, for every stage, on
    every process (each process sends its own stage's)."""
    mine = [p.detach().cpu().numpy() for p in stage.parameters()]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return {f'{s}.{i}': a for s, arrays in enumerate(everyone)
            for i, a in enumerate(arrays)}


def train_pipeline(args, rank, world, device, backend, data):
    """GPipe or 1F1B (`args.schedule`) over the processes with
    torch.distributed.pipelining: process s holds stage s of the pipeline
    MLP and updates only its parameters."""
    from torch.distributed.pipelining import (
        PipelineStage, Schedule1F1B, ScheduleGPipe)
    X_train, y_train, X_test, y_test, source = data
    B, m = args.batch_size, args.microbatches
    if world != 2:
        raise ValueError(error_message(
            '--pipeline cuts the model into 2 stages: start 2 processes, '
            'not {world}.', world=world))
    if m < 1 or B % m:
        raise ValueError(error_message(
            '--batch-size {B} cannot be cut into {m} equal micro-batches.',
            B=B, m=m))
    stages = pipeline_stages(args.seed)
    mine = stages[rank].to(device)
    in_flight = InFlight(mine)
    # The mean loss of each micro-batch; the schedule divides the summed
    # gradients by m, so they are those of the mean over the global batch
    Schedule = {'gpipe': ScheduleGPipe, '1f1b': Schedule1F1B}[args.schedule]
    schedule = Schedule(PipelineStage(mine, rank, world, device),
                        n_microbatches=m, loss_fn=nn.CrossEntropyLoss())
    optimizer = make_optimizer(args, mine.parameters())
    total_steps = len(y_train) // B * args.epochs
    step, losses, seconds, first_batches = 0, [], 0.0, []
    os.makedirs(args.out, exist_ok=True)
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        # Both stages take every whole global batch, in the same order
        for step, idx in shards_of_epoch(args, len(y_train), 0, 1, epoch,
                                         step, first_batches):
            t0 = time.perf_counter()
            for group in optimizer.param_groups:  # cosine decay
                group['lr'] = learning_rate(step - 1, args.lr, warmup_steps=0,
                                            total_steps=total_steps)
            optimizer.zero_grad()
            if rank == 0:  # the first stage takes the inputs
                schedule.step(torch.from_numpy(X_train[idx]).to(device))
            else:  # the last stage, the labels
                micro = []
                schedule.step(target=torch.from_numpy(y_train[idx]).to(
                    device), losses=micro)
                losses.append(sum(float(l.detach()) for l in micro) / m)
            optimizer.step()
            seconds += time.perf_counter() - t0
            if step == 1:
                # Step 1 also ran a forward pass of its own that works out
                # the shapes to send, with no backward: count from step 2
                in_flight.now = in_flight.most = 0
                whole = gather_stages(mine)
                if rank == 0:
                    write_npz(os.path.join(args.out, 'params_step1.npz'),
                              whole)
        if rank == world - 1:
            print(_('epoch {epoch}: loss {loss:.3f} (last stage), '
                    '{seconds:.1f} sec').format(
                epoch=epoch + 1, loss=losses[-1],
                seconds=time.perf_counter() - start), flush=True)
    total = time.perf_counter() - start
    mine_times = {'rank': rank, 'local_rank': int(os.environ['LOCAL_RANK']),
                  'world_size': world, 'host': socket.gethostname(),
                  'backend': backend, 'device': str(device), 'steps': step,
                  'examples': step * B, 'seconds_compute': seconds,
                  'seconds_communication': 0.0, 'seconds_total': total,
                  'first_shard_of_epoch': first_batches,
                  'activations_in_flight': in_flight.most}
    everyone = [None] * world
    dist.all_gather_object(everyone, (mine_times, losses))
    whole = gather_stages(mine)
    if rank == 0:
        net = nn.Sequential(*pipeline_stages(args.seed))
        with torch.no_grad():
            for name, p in net.named_parameters():  # '0.params.1'
                s, _kind, i = name.split('.')
                p.copy_(torch.from_numpy(whole[f'{s}.{i}']))
        acc = evaluate(net.to(device), X_test, y_test, device)
        mine_times['test_acc'] = acc
        result = {'framework': 'torch', 'world_size': world,
                  'backend': backend, 'epochs': args.epochs,
                  'batch_size': B, 'lr': args.lr, 'seed': args.seed,
                  'num_train': len(y_train), 'num_test': len(y_test),
                  'data': source, 'steps': step, 'examples': step * B,
                  'test_acc': acc, 'model': 'pipeline MLP',
                  'microbatches': m, 'schedule': args.schedule,
                  'losses': everyone[-1][1],
                  'seconds_total': max(p['seconds_total'] for p, _l in
                                       everyone),
                  'processes': [p for p, _l in everyone]}
        write_json(os.path.join(args.out, 'result.json'), result)
        print(_('test acc {test_acc:.3f} with {world} processes '
                '({backend}), {seconds:.1f} sec').format(
            test_acc=acc, world=world, backend=backend, seconds=total),
            flush=True)
    write_json(os.path.join(args.out, f'rank{rank}.json'), mine_times)
    dist.destroy_process_group()
