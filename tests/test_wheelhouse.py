"""tools/wheelhouse.py: the wheelhouse of make test-gpu on an offline GPU
node holds wheels only, for the node's Python, never torch, numpy or an
NVIDIA/CUDA wheel (the node's own are used), d2lpar's wheel and every
tool, in 60 MB at most; the install from it never reaches an index and
never replaces what the node has."""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import wheelhouse  # noqa: E402 (tools/wheelhouse.py)


@pytest.fixture(scope='module')
def wh():
    return wheelhouse


def _complete(wh, folder):
    """A wheelhouse with a (tiny, fake) wheel of everything it needs."""
    folder.mkdir(exist_ok=True)
    (folder / 'd2lpar-0.1.0-py3-none-any.whl').write_bytes(b'x')
    for r in wh.requirements():
        name = wh.requirement_name(r).replace('-', '_')
        (folder / f'{name}-1.0-py3-none-any.whl').write_bytes(b'x')
    return folder


def test_the_requirements_leave_torch_and_numpy_to_the_node(wh):
    names = [wh.requirement_name(r) for r in wh.requirements()]
    assert not {'torch', 'numpy'} & set(names)
    assert {'pytest', 'pytest-xdist', 'nbval', 'nbclient', 'nbformat',
            'ipykernel', 'matplotlib', 'psutil'} <= set(names)


def test_a_complete_wheelhouse_passes(wh, tmp_path):
    folder = _complete(wh, tmp_path / 'wh')
    (folder / 'pyzmq-27.0-cp312-abi3-manylinux_2_28_x86_64.whl').write_bytes(
        b'x')
    (folder / 'wcwidth-0.9-cp310-abi3-manylinux2014_x86_64.whl').write_bytes(
        b'x')
    (folder / 'psutil-7.0-cp312-cp312-manylinux2014_x86_64.whl').write_bytes(
        b'x')
    assert wh.problems(folder, python_version='3.12') == []


@pytest.mark.parametrize('filename', [
    'torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl',
    'numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl',
    'nvidia_cublas-13.0.0-py3-none-manylinux_2_27_x86_64.whl',
    'nvidia-nccl-cu13-2.27.7-py3-none-manylinux_2_18_x86_64.whl',
    'triton-3.5.0-cp312-cp312-manylinux_2_27_x86_64.whl',
    'cuda_bindings-13.0.1-cp312-cp312-manylinux_2_24_x86_64.whl'])
def test_torch_numpy_and_nvidia_are_refused(wh, tmp_path, filename):
    folder = _complete(wh, tmp_path / 'wh')
    (folder / filename).write_bytes(b'x')
    found = wh.problems(folder)
    assert len(found) == 1 and found[0].startswith(filename), found


@pytest.mark.parametrize('filename, why', [
    ('psutil-7.0.0.tar.gz', 'not a wheel'),
    ('psutil-7.0-cp311-cp311-manylinux2014_x86_64.whl', 'not for Python'),
    ('pyzmq-27.0-cp313-abi3-manylinux_2_28_x86_64.whl', 'not for Python')])
def test_sdists_and_other_pythons_are_refused(wh, tmp_path, filename, why):
    folder = _complete(wh, tmp_path / 'wh')
    (folder / filename).write_bytes(b'x')
    found = wh.problems(folder, python_version='3.12')
    assert len(found) == 1 and why in found[0], found


def test_d2lpar_and_the_tools_must_be_there(wh, tmp_path):
    folder = _complete(wh, tmp_path / 'wh')
    (folder / 'd2lpar-0.1.0-py3-none-any.whl').unlink()
    next(folder.glob('nbclient-*')).unlink()
    assert sorted(wh.problems(folder)) == ['no wheel of d2lpar',
                                           'no wheel of nbclient']


def test_the_size_limit(wh, tmp_path, capsys):
    folder = _complete(wh, tmp_path / 'wh')
    (folder / 'matplotlib-3.11-cp312-cp312-manylinux2014_x86_64.whl'
     ).write_bytes(b'x' * 1500)
    found = wh.problems(folder, max_mb=0.001)
    assert len(found) == 1 and 'more than the 0.001 MB allowed' in found[0]
    assert wh.problems(folder, max_mb=0.01) == []
    # The command line says so, and fails
    assert wh.main(['check', str(folder), '--max-mb', '0.001']) == 1
    out, err = capsys.readouterr()
    assert 'MB (at most 0.001 MB)' in out and 'ERROR' in err
    assert wh.MAX_MB == 60


def test_the_offline_install_reaches_no_index(wh):
    command = wh.install_command('/node/wheelhouse', python='py')
    assert command[:4] == ['py', '-m', 'pip', 'install']
    assert '--no-index' in command
    i = command.index('--find-links')
    assert command[i + 1] == '/node/wheelhouse'
    assert '--only-binary=:all:' in command
    assert not any(a.startswith(('--index-url', '--extra-index-url',
                                 '--upgrade', '-U', '--force-reinstall',
                                 '--ignore-installed'))
                   for a in command)
    names = [wh.requirement_name(a) for a in command[4:]
             if not a.startswith('-') and a != '/node/wheelhouse']
    assert 'd2lpar' in names and not {'torch', 'numpy'} & set(names)


@pytest.mark.skipif(shutil.which('make') is None, reason='no make here')
def test_make_test_gpu_installs_from_the_wheelhouse():
    """make test-gpu WHEELHOUSE=DIR passes DIR to the install, in a venv
    that sees the packages of PYTHON (the node's)."""
    out = subprocess.run(
        ['make', '-n', '--no-print-directory', 'test-gpu',
         f'PYTHON={sys.executable}', 'WHEELHOUSE=/node/wh'],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f'{sys.executable} tools/wheelhouse.py venv build/gpu-venv' in out
    assert 'tools/wheelhouse.py install' in out
    assert '--wheelhouse /node/wh' in out
    assert 'D2LPAR_REQUIRE_GPU=1' in out
    assert 'tools/gpu_lessons.py --out build/gpu' in out
    assert 'notebooks/en/pytorch/multiple-gpus.ipynb' in out
    assert 'notebooks/en/pytorch/solutions/multiple-gpus.ipynb' in out
