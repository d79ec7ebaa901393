"""Lesson 3's overlap of DDP's allreduces with the backward pass, traced.

The lesson calls `run([0.05, 25])`, which starts this module as a script
under torchrun on 127.0.0.1::

    python -m torch.distributed.run --nproc-per-node 2 \\
        -m d2lpar.distributed.ddp_overlap --bucket-cap-mb 0.05 25 --out OUT

For each bucket size, each process wraps the lesson's ResNet-18 in DDP
(gloo on the CPU, one thread for its computation), takes two steps on a
random batch (DDP sorts its buckets again after the first), then records
`--steps` steps with ``torch.profiler``: the backward pass's autograd
events, on the thread that calls ``backward``, and Gloo's allreduces, on
Gloo's own threads. Their times are taken on ``time.perf_counter``, the
one clock of all the processes of a machine, so that the traces of the
processes can be put on one timeline. Each process writes
OUT/events-RANK.json; rank 0 then writes OUT/result.json.
"""
import argparse
import json
import os
import tempfile
import time

from d2lpar import timeline as _timeline
from d2lpar.distributed.ddp_launch import run_module
from d2lpar.i18n import N_, _
from d2lpar.distributed.scripts import leave_now, write_json

BACKWARD = 'autograd::engine::evaluate_function: '  # the autograd events


class OverlapRun:
    """The traced steps of one bucket size, in all the processes.

    `events`: a `Timeline` whose rows are the processes, the backward
    pass as 'compute' and the allreduces as 'communication'.
    `allreduces`: the allreduces of one step (one per bucket).
    `hidden`: the share of the allreduces' time that falls while the
    backward pass of the same process computes (all processes together).
    """

    def __init__(self, bucket_cap_mb, events, steps):
        self.bucket_cap_mb = bucket_cap_mb
        self.steps = steps
        self.events = _timeline.Timeline()
        self.events.source = 'torch.profiler'
        self.events.events = events
        rows = self.events.rows()
        comm = [e for e in events if e.kind == 'communication']
        self.allreduces = len(comm) // (len(rows) * steps)
        under, total = 0.0, 0.0
        for row in rows:
            compute = _union([(e.start, e.end) for e in events
                              if e.row == row and e.kind == 'compute'])
            for e in comm:
                if e.row == row:
                    total += e.end - e.start
                    under += sum(max(0.0, min(e.end, b) - max(e.start, a))
                                 for a, b in compute)
        self.hidden = under / total if total else 0.0

    def plot(self):
        """The merged timeline, one row per process."""
        return self.events.plot(title=_(
            'bucket_cap_mb = {cap}; allreduces per step: {n}').format(
                cap=self.bucket_cap_mb, n=self.allreduces))


def _union(spans):
    """The intervals `spans` (start, end) merged where they overlap."""
    merged = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def run(bucket_caps_mb, width=8, batch_size=64, steps=2, num_processes=2,
        timeout=120):
    """Train the lesson's ResNet-18 (`width`) with DDP in `num_processes`
    processes on the CPU, once for each bucket size of `bucket_caps_mb`
    (in MB, as DDP's `bucket_cap_mb`), and trace `steps` steps of each.
    Returns one `OverlapRun` per bucket size, the events of all the
    processes on one timeline (seconds from the first one)."""
    with tempfile.TemporaryDirectory(prefix='d2lpar-overlap-') as out:
        run_module('d2lpar.distributed.ddp_overlap', [
            '--out', out, '--width', str(width), '--batch-size',
            str(batch_size), '--steps', str(steps), '--bucket-cap-mb',
            *[str(c) for c in bucket_caps_mb]], out, num_processes, timeout,
            N_('The traced DDP run in {n} processes failed ({code}): '
               'stopped all its processes. End of its log:'))
        spans = []  # (cap, rank, name, kind, start, end)
        for rank in range(num_processes):
            with open(os.path.join(out, f'events-{rank}.json')) as f:
                spans += [(cap, rank, *s) for cap, s in json.load(f)]
    runs = []
    for cap in bucket_caps_mb:
        mine = [s for s in spans if s[0] == cap]
        t0 = min(s[4] for s in mine)
        events = [_timeline.Event(
            name, _('process {rank}').format(rank=rank), start - t0,
            end - t0, kind) for _c, rank, name, kind, start, end in mine]
        runs.append(OverlapRun(cap, events, steps))
    return runs


# --------------------------------------------------------------------------
# The script that torchrun runs in every process
# --------------------------------------------------------------------------
def traced_steps(net, X, y, steps):
    """`steps` training steps of `net` (without updates: only the
    gradients matter here) under the profiler. Returns the spans (name,
    kind, start, end) of the backward pass and of the allreduces, in
    seconds of ``time.perf_counter``."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function
    loss = torch.nn.CrossEntropyLoss()
    for _step in range(2):  # DDP sorts its buckets after the first step
        net.zero_grad()
        loss(net(X), y).backward()
    dist.barrier()  # both processes start the traced steps together
    with _timeline.quiet_stderr():
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
    with record_function('d2lpar: clock'):
        clock = time.perf_counter()
    for _step in range(steps):
        net.zero_grad()
        loss(net(X), y).backward()
    with _timeline.quiet_stderr():
        prof.__exit__(None, None, None)
    events = [e for e in prof.events() if e.cpu_parent is None]
    # The profiler's clock in microseconds, turned into perf_counter's
    offset = next(e.time_range.start for e in events
                  if e.name == 'd2lpar: clock') - 1e6 * clock
    spans = []
    for e in events:
        if e.name == BACKWARD + 'torch::autograd::AccumulateGrad':
            # Not computation: it adds a gradient into .grad, and DDP's
            # hook runs inside it (it copies the gradient into its bucket
            # and, when the bucket is full, starts the bucket's allreduce)
            continue
        elif e.name.startswith(BACKWARD):
            # 'ConvolutionBackward0' -> 'Convolution', short on the plot
            name = e.name[len(BACKWARD):].split('Backward')[0]
            kind = 'compute'
        elif e.name == 'gloo:all_reduce':
            name, kind = 'allreduce', 'communication'
        else:
            continue  # the forward pass, Gloo's broadcast of the buffers
        spans.append((name, kind, (e.time_range.start - offset) / 1e6,
                      (e.time_range.end - offset) / 1e6))
    return spans


def main():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from d2lpar.torch import resnet18

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--bucket-cap-mb', type=float, nargs='+',
                        required=True)
    parser.add_argument('--width', type=int, default=8)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--steps', type=int, default=2)
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core's worth each: two cores, two ranks
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    torch.manual_seed(rank)  # a different shard of data in each process
    X = torch.randn(args.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch_size,))
    results = []
    for cap in args.bucket_cap_mb:
        torch.manual_seed(0)  # the same parameters in every process
        net = DistributedDataParallel(resnet18(width=args.width),
                                      bucket_cap_mb=cap)
        results += [(cap, s) for s in traced_steps(net, X, y, args.steps)]
    write_json(os.path.join(args.out, f'events-{rank}.json'), results)
    dist.barrier()  # every process has written its events
    if rank == 0:
        # Written last: the launcher takes it as the sign of a whole run
        write_json(os.path.join(args.out, 'result.json'),
                   {'bucket_cap_mb': args.bucket_cap_mb})
    dist.barrier()  # nobody leaves before the results are written
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
    leave_now()  # not the interpreter's normal exit (see scripts.py)
