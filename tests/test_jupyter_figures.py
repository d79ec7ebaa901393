"""What a student sees in JupyterLab: a figure, not its text. With the
pinned matplotlib-inline and IPython, a kernel shows a figure only as
``<Figure size ...>`` until a format is registered, which importing a
backend of d2lpar does."""
import nbformat
import pytest
from nbclient import NotebookClient

CELL = '''from d2lpar import {backend} as d2l
from types import SimpleNamespace
import matplotlib.pyplot as plt
process = dict(rank=0, steps=1, examples=1, seconds_compute=1.0,
               seconds_communication=0.5, seconds_total=2.0)
d2l.plot_processes([SimpleNamespace(framework='torch', num_workers=1,
                                    processes=[process])])
plt.plot([1, 2, 3])  # the student's own plot
plt.show()'''


@pytest.mark.parametrize('backend', ['torch', 'mxnet'])
def test_a_kernel_shows_every_figure_as_a_picture(backend, tmp_path,
                                                  monkeypatch):
    pytest.importorskip(backend)
    # As in JupyterLab: no MPLBACKEND (the tests' Agg), the kernel's own
    monkeypatch.delenv('MPLBACKEND', raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL.format(backend=backend))]
    NotebookClient(nb, timeout=120, kernel_name='python3', resources={
        'metadata': {'path': str(tmp_path)}}).execute()
    shown = [o for o in nb.cells[0].outputs if o.output_type == 'display_data']
    assert len(shown) == 2, nb.cells[0].outputs
    for output in shown:
        assert 'image/svg+xml' in output.data, output.data
