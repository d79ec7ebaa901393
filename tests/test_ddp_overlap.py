"""Lesson 3: DDP's allreduces traced in two real processes
(d2lpar.distributed.ddp_overlap). Small buckets give several allreduces
per step, the default 25 MB bucket one; the merged timeline holds the
events of both processes, and its share of hidden communication is a
share."""
import pytest

pytest.importorskip('torch')

from d2lpar.distributed import ddp_overlap  # noqa: E402


@pytest.fixture(scope='module')
def runs():
    return ddp_overlap.run([0.05, 25], steps=1, timeout=180)


def test_small_buckets_give_several_allreduces(runs):
    small, large = runs
    # 0.71 MB of gradients in buckets of 0.05 MB: several buckets, each
    # with its own allreduce
    assert small.allreduces > 1
    # The whole network fits in the first 1 MiB bucket
    assert large.allreduces == 1


def test_the_timeline_holds_both_processes(runs):
    for run in runs:
        rows = {e.row for e in run.events.events}
        assert rows == {'process 0', 'process 1'}
        for row in rows:  # each process has computation and allreduces
            kinds = {e.kind for e in run.events.events if e.row == row}
            assert kinds == {'compute', 'communication'}


def test_hidden_share_is_a_share(runs):
    for run in runs:
        assert 0.0 <= run.hidden <= 1.0
