"""tools/check_workflow.py: the workflow's jobs, the macOS arm64 and
Windows jobs of the PyTorch unit tests that it requires, and the GPU job's
install from a wheelhouse built by a job it needs."""
import importlib.util
import pathlib
import shutil

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def check(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        'check_workflow', ROOT / 'tools' / 'check_workflow.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(tmp_path, edit=None):
    (tmp_path / '.github' / 'workflows').mkdir(parents=True)
    shutil.copy(ROOT / 'Makefile', tmp_path / 'Makefile')
    doc = yaml.safe_load((ROOT / '.github' / 'workflows' / 'ci.yml')
                         .read_text())
    if edit:
        edit(doc['jobs'])
    (tmp_path / '.github' / 'workflows' / 'ci.yml').write_text(
        yaml.safe_dump({'on': doc[True], 'jobs': doc['jobs']}))
    return tmp_path


def test_the_workflow_passes(check):
    assert check.main(ROOT) == 0


def test_the_copy_passes(check, tmp_path):
    assert check.main(_tree(tmp_path)) == 0


def _without_macos(jobs):
    for job_id in [j for j, job in jobs.items()
                   if str(job['runs-on']).startswith('macos')]:
        del jobs[job_id]


def _windows_without_tests(jobs):
    for job in jobs.values():
        if str(job['runs-on']).startswith('windows'):
            job['steps'] = [s for s in job['steps']
                            if 'pytest' not in s.get('run', '')]


def _intel_mac(jobs):
    for job in jobs.values():
        if str(job['runs-on']).startswith('macos'):
            job['runs-on'] = 'macos-13'


def _gpu_without_wheelhouse(jobs):
    for step in jobs['gpu']['steps']:
        if 'test-gpu' in step.get('run', ''):
            step['run'] = step['run'].split(' WHEELHOUSE=')[0]


def _gpu_needs_nothing(jobs):
    del jobs['gpu']['needs']


@pytest.mark.parametrize('edit, missing', [
    (_without_macos, 'no macOS arm64 job'),
    (_intel_mac, 'no macOS arm64 job'),
    (_windows_without_tests, 'no Windows job'),
    (_gpu_without_wheelhouse, 'make test-gpu without WHEELHOUSE='),
    (_gpu_needs_nothing, 'no job it needs runs make wheelhouse')])
def test_a_missing_platform_fails(check, tmp_path, capsys, edit, missing):
    assert check.main(_tree(tmp_path, edit)) == 1
    assert missing in capsys.readouterr().err
