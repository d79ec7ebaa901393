"""Benchmarks of d2lpar: allreduce, training throughput, and lesson times.

Usage::

    .venv/bin/python -m tools.bench                  # full run (make bench)
    .venv/bin/python -m tools.bench --quick          # smoke run: fewer sizes,
                                                     # repeats and examples
    .venv/bin/python -m tools.bench --skip-notebooks # sections 1 and 2 only
    .venv/bin/python -m tools.bench --languages all  # time the notebooks of
                                                     # every language (slow)
    .venv/bin/python -m tools.bench --budget 900     # allow 15 minutes

``make bench`` must end within 10 minutes on 2 cores: a notebook that would
end after ``--budget`` seconds (570 by default) is skipped and reported as
not run. On an idle 2-core machine the full run takes about 6 minutes.

It prints markdown tables and writes them to ``build/bench/results.md``,
with every raw number in ``build/bench/results.json``. Every figure that
matters is a ratio of two numbers measured in the same run on the same
machine, so the tables can be compared between machines, not the seconds.

Sections:

1. Allreduce: ``d2l.allreduce``, ``d2l.ring_allreduce`` and
   ``d2l.direct_allreduce`` of both backends (``d2l.measure_allreduce`` on
   ``d2l.try_devices(k)``) and
   ``torch.distributed.all_reduce`` over gloo (k processes on 127.0.0.1),
   as a fraction of the one-host limit 2kN / memory-copy bandwidth on CPU
   stand-ins (on GPUs: the ring of the cost model on the link between them).
2. Training throughput: ``d2l.train`` on 1 and 2 devices against the
   chapter's own loop (per-batch synchronisation, the book's
   ``evaluate_accuracy_gpu``), with PyTorch DDP (2 gloo processes) and
   MXNet Gluon (kvstore 'device') as peers, and MXNET_CPU_TEMP_COPY=4
   against 16.
3. Lessons: wall time of each notebook under nbclient; by default those
   in English only, the other languages being estimated from them when
   their code cells are the same (``--languages all`` runs every one).

Each framework runs in its own subprocess (``python -m tools.bench`` with
the hidden ``--worker`` option), so PyTorch and MXNet never share a process,
and a worker that hangs is killed after a timeout. The benchmark never
fails the build: it exits 0 unless this script itself crashes.

The package: settings.py (sizes, workloads, targets), running.py (starting
and stopping the workers), workers.py and standins.py (what runs in them),
sections.py (what is measured), report.py (the markdown tables),
targets.py (the verdicts), machine.py (versions and load), __main__.py
(the command line).
"""
