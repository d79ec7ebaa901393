"""Data-parallel training of the lessons' LeNet with PyTorch's
DistributedDataParallel (DDP): one process per device, on one machine or
on several.

One machine, two processes (GPUs: backend nccl, process i on cuda:i;
the CPU: gloo, also when the machine has fewer GPUs than processes, since
NCCL needs a GPU per process)::

    torchrun --standalone --nproc-per-node 2 \\
        -m d2lpar.distributed.ddp_train --out OUT

Several machines: the same command on each, pointing at the first one
(HOST), with G processes per machine::

    torchrun --nnodes 2 --nproc-per-node G --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 -m d2lpar.distributed.ddp_train --out OUT

(the c10d rendezvous numbers the machines itself; ``--node-rank R`` is
only needed with ``--rdzv-backend static``). To train on GPUs, every
machine needs G of them; if one has fewer, pass ``--cpu`` on all machines
(one backend for all). From Python, ``d2lpar.distributed.launch_torch``
runs the first command on loopback.

The global batch (``--batch-size``) is cut into equal contiguous shards,
one per process. Every process starts from the same parameters (drawn
after ``torch.manual_seed(--seed)``, see `initial_params`) and the same
shuffled order, takes the mean loss over its shard and lets DDP average
the gradients: the mean of k shard means is the mean over the global
batch, so k processes take the same steps as one process with the same
global batch.

Timing, per process and step. *Compute* runs from the start of the
forward pass until DDP hands over the last gradient bucket for reduction
(all gradients computed). *Communication* is the wall time during which
at least one bucket's allreduce is in flight: a communication hook wraps
DDP's default ``allreduce_hook`` and notes when each bucket is handed
over and when its future completes. (Buckets may overlap the backward
pass, then the two times overlap too; LeNet fits in one bucket.) On a GPU
the times are those of CUDA events queued on the stream, which the GPU
stamps when it runs them; they are read after training, so that the hook
never waits for the GPU. *Total* is the wall time of the training
loop, updates included. With ``--fsdp`` each layer, then the whole
model, is sharded with FSDP's ``fully_shard`` instead of wrapped in DDP:
every process keeps 1/world of each parameter, its gradient and its
optimizer state, gathers a layer's parameters just before it computes and
reduce-scatters its gradients; there is no hook, so *compute* includes
that communication. With ``--pipeline`` (two processes) the model is the
MLP of lesson 5's pipeline (``pipeline_params``), cut into two stages,
one per process, and ``torch.distributed.pipelining`` runs the GPipe
schedule (or 1F1B, ``--schedule 1f1b``) with ``--microbatches``
micro-batches: process 0 feeds every
whole global batch into stage 0, process 1 computes the loss from its
labels; activations and their gradients go between the processes. Each
process updates its own stage; *compute* includes the sends and receives.
Writes OUT/rank{r}.json per process and, on rank
0, OUT/params_step1.npz (the parameters after the first step) and
OUT/result.json (test accuracy, and every process's times).

With ``--checkpoint DIR`` rank 0 saves the model, the optimizer, the
number of epochs done and the seed of the data order to
DIR/checkpoint.pt after every epoch, atomically (`save_checkpoint`), and a
run that finds that file resumes after its last epoch (`resume`): under
``torchrun --max-restarts 1``, a process that dies makes torchrun stop
the others and start them all again, and they go on from the checkpoint.
``--fail-at-step N`` kills the last rank with SIGKILL at step N, the
first time only (a file in OUT remembers), to watch that happen. With
``--amp`` the forward pass runs in bfloat16 on a CPU
(``torch.autocast('cpu')``) and in float16 on a GPU, with a
``GradScaler``; the parameters, and the evaluation, stay in float32.

With ``--accumulate N`` each process cuts its shard into N micro-batches
and adds up their gradients, communicating only in the backward pass of
the last one (``no_sync``); the hook counts the allreduces.
``--naive-accumulate`` leaves ``no_sync`` out, as a naive loop does: the
same step, with an allreduce per micro-batch. At the end
every process counts the correct answers on its share of the test set
and one allreduce adds up the counts (``evaluate_shared``); rank 0 also
evaluates alone, for comparison. ``sharded_loader`` shows the standard
way to shard data (``DistributedSampler``, ``set_epoch``).
"""
import contextlib
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import fully_shard
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from d2lpar.distributed.ddp_practices import (  # noqa: F401 (lesson 4 shows them here)
    AMP_HELP, CHECKPOINT, Precision, accumulate_gradients,
    choose_gloo_interface, count_correct, evaluate, evaluate_shared,
    first_indices, fresh_store, make_optimizer, restarts, resume,
    save_checkpoint, say_lost_machines, sharded_loader)
from d2lpar.devices import choose_gpu
from d2lpar.i18n import N_, _, error_message
from d2lpar.distributed.pipeline_train import train_pipeline
from d2lpar.distributed.scripts import (
    leave_now, parse_training_arguments, shard_size, shards_of_epoch,
    training_arguments, training_data, write_json, write_npz)
from d2lpar.training import learning_rate


def lenet(params):
    """The lessons' LeNet (``d2l.lenet``) as an ``nn.Module``, for DDP and
    FSDP, holding the values of `params`, a list like the one
    ``d2l.lenet_params()`` returns (fully connected weights as (in, out)).
    The benchmark (tools/bench) uses it too."""
    net = nn.Sequential(
        nn.Conv2d(1, 20, kernel_size=3), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(), nn.AvgPool2d(2, 2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))
    with torch.no_grad():
        for p, v in zip(net.parameters(), params):
            p.copy_(v.T if v.ndim == 2 else v)
    return net


def initial_params(seed):
    """The values every process starts from, in the layout of
    ``d2l.lenet_params()``: N(0, 0.1) weights and zero biases, drawn after
    torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    params = []
    for shape in ((20, 1, 3, 3), (50, 20, 5, 5), (800, 128), (128, 10)):
        outputs = shape[0] if len(shape) == 4 else shape[1]
        params += [torch.randn(shape) * 0.1, torch.zeros(outputs)]
    return params


class CommTimer:
    """The state of the hook `timed_allreduce`: when each step started,
    when its last gradient bucket was handed over for reduction, and when
    each bucket's allreduce started and ended.

    A mark is the CPU's clock, or, on a GPU, a CUDA event queued on the
    current stream, which the GPU stamps when it gets there. The events
    are read once training is over (`seconds`), so that neither the hook
    nor the training loop ever waits for the GPU."""

    def __init__(self, cuda):
        self.cuda, self.steps = cuda, []
        self.spans, self.handed_over = [], None
        self.allreduces = 0  # calls of the hook: buckets sent, all steps
        self.origin = self.mark()

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # after the work queued so far on this stream
        return event

    def end_step(self, start):
        """Close the step that began at the mark `start`."""
        self.steps.append((start, self.handed_over, self.spans))
        self.spans, self.handed_over = [], None

    def seconds(self):
        """(compute, communication), summed over the steps: from the
        start of each step until its last bucket was handed over, and the
        time during which some allreduce was in flight. On a GPU, waits
        for the events first (call it after training)."""
        if self.cuda:
            torch.cuda.synchronize()
        at = self._seconds
        compute = sum(at(handed) - at(start) for start, handed, _ in
                      self.steps)
        communication = sum(busy([(at(a), at(b)) for a, b in spans])
                            for _, _, spans in self.steps)
        return compute, communication

    def _seconds(self, mark):
        if self.cuda:  # milliseconds since the first mark
            return self.origin.elapsed_time(mark) / 1e3
        return mark


def busy(spans):
    """Seconds covered by at least one of the (start, end) `spans`."""
    total, end = 0.0, float('-inf')
    for a, b in sorted(spans):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def timed_allreduce(timer, bucket):
    """A DDP communication hook: DDP's own allreduce, with a stopwatch.

    It returns the future of the allreduce, and waits for nothing: it
    only sets marks. (Waiting for the stream here would hold this thread
    until the GPU caught up, so that DDP could queue neither the next
    buckets nor the rest of the backward pass in the meantime.) The mark
    set in `done` comes after the allreduce: a callback of a future on
    GPUs runs on streams that wait for that future's kernels."""
    start = timer.handed_over = timer.mark()
    timer.allreduces += 1

    def done(fut):
        timer.spans.append((start, timer.mark()))
        return fut.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


NAIVE_HELP = N_('with --accumulate: leave no_sync() out, as a naive loop '
                'does, so that every micro-batch sends an allreduce (the '
                'same step, more communication)')


def parse_args(argv=None):
    p = training_arguments(__doc__, 'processes', amp_help=AMP_HELP,
                           naive_help=NAIVE_HELP)
    # Lesson 5's ways beyond data parallelism
    p.add_argument('--pipeline', action='store_true', help=_(
        'train the MLP of lesson 5 in two pipeline stages, one per process'))
    p.add_argument('--schedule', choices=['gpipe', '1f1b'], default='gpipe',
                   help=_('the pipeline schedule (with --pipeline)'))
    p.add_argument('--microbatches', type=int, default=4, help=_(
        'micro-batches per step of the pipeline'))
    p.add_argument('--fsdp', action='store_true', help=_(
        'shard parameters, gradients and optimizer state with FSDP '
        '(fully_shard) instead of DDP'))
    return parse_training_arguments(p, argv)


@record  # torchrun then reports the traceback of a failed rank
def main(argv=None):
    args = parse_args(argv)
    if 'RANK' not in os.environ:
        raise SystemExit(error_message(
            'Start this script with torchrun, e.g. torchrun --standalone '
            '--nproc-per-node 2 -m d2lpar.distributed.ddp_train --out OUT'))
    rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    local_rank = int(os.environ['LOCAL_RANK'])
    local_world = int(os.environ['LOCAL_WORLD_SIZE'])  # on this machine
    B = args.batch_size
    b = shard_size(args, world)  # this process's shard of every global batch
    gpu, notice = choose_gpu(
        0 if args.cpu else torch.cuda.device_count(), local_rank, local_world)
    if notice and local_rank == 0:
        print(f'd2lpar: {notice}', flush=True)
    cuda = gpu is not None
    if cuda:
        device = torch.device('cuda', gpu)
        torch.cuda.set_device(device)
    else:
        device = torch.device('cpu')
    backend = 'nccl' if cuda else 'gloo'
    choose_gloo_interface()
    dist.init_process_group(backend, store=fresh_store(rank, world),
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.comm_timeout))

    X_train, y_train, X_test, y_test, source = training_data(args, B)
    if args.pipeline:
        return train_pipeline(args, rank, world, device, backend,
                              (X_train, y_train, X_test, y_test, source))
    timer = CommTimer(cuda)
    if args.fsdp and args.checkpoint:
        raise ValueError(error_message(
            '--checkpoint does not work with --fsdp here: a sharded model '
            'is saved with torch.distributed.checkpoint.'))
    if args.fsdp:  # each process keeps 1/world of every layer's tensors
        model = Sharded(lenet(initial_params(args.seed)).to(device))
    else:
        model = DistributedDataParallel(  # broadcasts rank 0's parameters
            lenet(initial_params(args.seed)).to(device),
            device_ids=[local_rank] if cuda else None)
        model.register_comm_hook(timer, timed_allreduce)
    optimizer = make_optimizer(args, model.parameters())
    precision = Precision(args.amp, cuda)  # float32 unless --amp
    total_steps = len(y_train) // B * args.epochs
    loss_fn = nn.CrossEntropyLoss()  # mean over this process's shard
    order = {'seed': args.seed, 'num_train': len(y_train), 'batch_size': B}
    # Go on after the last epoch of a checkpoint, if there is one
    done, step = resume(args, model, optimizer, precision, order)
    first_shards = [None] * done  # this process's first shard of each epoch
    os.makedirs(args.out, exist_ok=True)

    dist.barrier()  # start the clocks together
    start = time.perf_counter()
    for epoch in range(done, args.epochs):
        for step, idx in shards_of_epoch(args, len(y_train), rank, world,
                                         epoch, step, first_shards):
            X = torch.from_numpy(X_train[idx]).to(device)
            y = torch.from_numpy(y_train[idx]).to(device)
            t0 = timer.mark()
            for group in optimizer.param_groups:  # cosine decay
                group['lr'] = learning_rate(step - 1, args.lr, warmup_steps=0,
                                            total_steps=total_steps)
            optimizer.zero_grad()
            # DDP averages the gradients over processes
            loss = accumulate_gradients(model, loss_fn, X, y,
                                        args.accumulate, precision,
                                        naive=args.naive_accumulate)
            if args.fsdp:  # no hook: computing includes communicating
                timer.handed_over = timer.mark()
            timer.end_step(t0)
            precision.step(optimizer)
            # FSDP: every process gathers the whole tensors
            if step == 1 and (args.fsdp or rank == 0):
                whole = {k: v.full_tensor() if args.fsdp else v for k, v in
                         model.module.state_dict().items()}
                if rank == 0:
                    write_npz(os.path.join(args.out, 'params_step1.npz'),
                              {k: v.detach().cpu().numpy()
                               for k, v in whole.items()})
        if rank == 0:
            print(_('epoch {epoch}: loss {loss:.3f} (rank 0 shard), '
                    '{seconds:.1f} sec').format(
                epoch=epoch + 1, loss=loss.item(),
                seconds=time.perf_counter() - start), flush=True)
            if args.checkpoint:  # after every epoch
                save_checkpoint(os.path.join(args.checkpoint, CHECKPOINT), {
                    'model': model.module.state_dict(),
                    'optimizer': optimizer.state_dict(),
                    'precision': precision.state_dict(),
                    'epoch': epoch + 1, 'step': step, 'data_order': order})
    compute, communication = timer.seconds()  # waits for the GPU
    total = time.perf_counter() - start
    held = held_bytes(model, optimizer)  # what this process keeps
    if args.fsdp:  # one more forward and backward, under the profiler
        held.update(gather_overlap(model, loss_fn, X, y))
        optimizer.zero_grad()

    mine = {'rank': rank, 'local_rank': local_rank, 'world_size': world,
            'host': socket.gethostname(), 'backend': backend,
            'device': str(device), 'steps': step, 'examples': step * b,
            'seconds_compute': compute,
            'seconds_communication': communication, 'seconds_total': total,
            'first_shard_of_epoch': first_shards,
            'accumulate': args.accumulate, 'allreduces': timer.allreduces,
            'naive_accumulate': args.naive_accumulate,
            **held}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if args.fsdp:  # a forward pass gathers parameters: all processes take it
        acc = evaluate(model.module, X_test, y_test, device)
    else:  # every process counts on its share of the test set
        correct, counted = evaluate_shared(model.module, X_test, y_test,
                                           device, rank, world)
        acc = correct / counted
    if rank == 0:
        mine['test_acc'] = acc
        if not args.fsdp:  # for comparison: rank 0 alone, the whole set
            mine['test_counted'] = counted
            mine['test_acc_rank0_alone'] = evaluate(model.module, X_test,
                                                    y_test, device)
        result = {'framework': 'torch', 'world_size': world,
                  'backend': backend, 'epochs': args.epochs,
                  'batch_size': B, 'lr': args.lr, 'seed': args.seed,
                  'num_train': len(y_train), 'num_test': len(y_test),
                  'data': source, 'steps': step,
                  'examples': step * B, 'test_acc': mine['test_acc'],
                  'restarts': restarts(), 'resumed_after_epoch': done,
                  'amp': precision.name, 'output_dtype': precision.seen,
                  'test_acc_rank0_alone': mine.get('test_acc_rank0_alone'),
                  'test_counted': mine.get('test_counted'),
                  'accumulate': args.accumulate,
                  'seconds_total': max(p['seconds_total'] for p in everyone),
                  'processes': everyone}
        write_json(os.path.join(args.out, 'result.json'), result)
        print(_('test acc {test_acc:.3f} with {world} processes '
                '({backend}), {seconds:.1f} sec').format(
            test_acc=mine['test_acc'], world=world, backend=backend,
            seconds=total), flush=True)
    write_json(os.path.join(args.out, f'rank{rank}.json'), mine)
    dist.barrier()  # every process has written its results
    dist.destroy_process_group()


def local_bytes(tensors):
    """Bytes of the `tensors` that this process holds: of a DTensor (a
    shard of FSDP), only its local part."""
    total = 0
    for t in tensors:
        if hasattr(t, 'to_local'):
            t = t.to_local()
        total += t.numel() * t.element_size()
    return total


def held_bytes(model, optimizer):
    """Bytes of parameters, gradients and optimizer state that this
    process keeps. Optimizer state: the tensors of one number per
    parameter (Adam's m and v), not Adam's step counter."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values()
             if torch.is_tensor(v) and v.dim() > 0]
    return {'parameter_bytes': local_bytes(params),
            'gradient_bytes': local_bytes(
                [p.grad for p in params if p.grad is not None]),
            'optimizer_bytes': local_bytes(state)}


def gather_overlap(model, loss_fn, X, y):
    """One forward and backward pass of FSDP under PyTorch's profiler:
    seconds during which an all-gather was moving data (Gloo's
    ``gloo:all_gather``, in its own threads), during which a layer was
    computing (convolutions and matrix products, forward and backward),
    and during which both were."""
    from torch.profiler import ProfilerActivity, profile
    computing = ('aten::convolution', 'aten::convolution_backward',
                 'aten::addmm', 'aten::mm')
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss_fn(model(X), y).backward()
    gathers, computes = [], []
    for event in prof.events():
        span = (event.time_range.start / 1e6, event.time_range.end / 1e6)
        if event.name == 'gloo:all_gather':
            gathers.append(span)
        elif event.name in computing:
            computes.append(span)
    both = max(0.0, busy(gathers) + busy(computes) - busy(gathers + computes))
    return {'seconds_all_gather': busy(gathers),
            'seconds_layers': busy(computes), 'seconds_overlap': both}


class Sharded(nn.Module):
    """`net` sharded with FSDP's ``fully_shard``: every layer with
    parameters is a unit of its own (gathered just before it computes,
    freed after), then the whole model; ``.module`` is `net`, as in DDP."""

    def __init__(self, net):
        super().__init__()
        for layer in net:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        self.module = fully_shard(net)

    def forward(self, X):
        return self.module(X)


if __name__ == '__main__':
    try:
        main()
    except Exception as e:  # say which machine was lost, if one was
        with contextlib.suppress(Exception):  # never hide the error itself
            say_lost_machines(e)
        raise
    leave_now(os.environ.get('RANK'))  # not the interpreter's normal exit
