"""Check .github/workflows/*.yml: valid YAML with jobs and steps, every
`make <target>` a step runs is a target of the Makefile, the PyTorch
unit tests run on macOS arm64 (macos-14 or later) and on Windows, and
the job of `make test-gpu` (an offline GPU runner) installs from a
wheelhouse (WHEELHOUSE=) that a job it needs builds (`make wheelhouse`).

Usage::

    .venv/bin/python tools/check_workflow.py   # needs PyYAML (in the venv)
"""
import pathlib
import re
import shlex
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
RULE = re.compile(r'^([A-Za-z0-9_.%/$()-][^:=#\t]*?)\s*::?(?![=])',
                  re.MULTILINE)


def makefile_targets():
    targets = set()
    for line in (ROOT / 'Makefile').read_text().splitlines():
        if line.startswith(('\t', '#', ' ')):
            continue
        m = RULE.match(line)
        if m:
            targets.update(m.group(1).split())
    return targets


def make_targets_in(command):
    """The targets of each `make ...` in a shell script."""
    return [target for targets, _ in make_calls(command)
            for target in targets]


def make_calls(command):
    """(targets, {variable: value}) of each `make ...` in a shell script."""
    calls = []
    for line in command.splitlines():
        for part in re.split(r'&&|\|\||;', line):
            words = shlex.split(part, comments=True)
            if words and words[0] == 'make':
                calls.append(
                    ([w for w in words[1:]
                      if not w.startswith('-') and '=' not in w],
                     dict(w.split('=', 1) for w in words[1:]
                          if '=' in w and not w.startswith('-'))))
    return calls


def runs_make(job, target):
    """The variables of each `make <target>` of `job`."""
    return [variables for step in job.get('steps') or []
            for targets, variables in make_calls(step.get('run', ''))
            if target in targets]


def gpu_problems(name, jobs):
    """The GPU runner has no network: make test-gpu installs from a
    wheelhouse that a job it needs builds."""
    problems = []
    for job_id, job in jobs.items():
        calls = runs_make(job, 'test-gpu')
        if not calls:
            continue
        needs = job.get('needs') or []
        needs = [needs] if isinstance(needs, str) else needs
        builders = [n for n in needs if runs_make(jobs.get(n, {}),
                                                  'wheelhouse')]
        if not all(v.get('WHEELHOUSE') for v in calls):
            problems.append(f'{name}: job {job_id} runs make test-gpu '
                            f'without WHEELHOUSE= (the GPU runner has no '
                            f'network)')
        elif not builders:
            problems.append(f'{name}: job {job_id} runs make test-gpu, '
                            f'but no job it needs runs make wheelhouse')
        else:
            print(f'{name}: job {job_id}: make test-gpu from the wheelhouse '
                  f'of job {", ".join(builders)}: ok')
    return problems


# The runners the PyTorch track must reach: the platforms MXNet has no
# wheel for
REACH = {'macOS arm64': re.compile(r'^macos-(1[4-9]|[2-9]\d)$'),
         'Windows': re.compile(r'^windows-')}


def runs_unit_tests(job):
    """Whether a job runs the unit tests (make test-unit, or pytest on
    tests/)."""
    for step in job.get('steps') or []:
        run = step.get('run', '')
        if 'test-unit' in make_targets_in(run):
            return True
        if re.search(r'pytest\s+(\S+\s+)*tests\b', run):
            return True
    return False


def reach_problems(name, jobs):
    """What is missing of the macOS arm64 and Windows jobs."""
    problems = []
    for platform, pattern in REACH.items():
        found = [job_id for job_id, job in jobs.items()
                 if isinstance(job.get('runs-on'), str)
                 and pattern.match(job['runs-on']) and runs_unit_tests(job)]
        if found:
            print(f'{name}: {platform}: job {", ".join(found)}: ok')
        else:
            problems.append(f'{name}: no {platform} job runs the PyTorch '
                            f'unit tests')
    return problems


def main(root=ROOT):
    global ROOT
    ROOT = root
    targets = makefile_targets()
    problems = []
    files = sorted((ROOT / '.github' / 'workflows').glob('*.y*ml'))
    if not files:
        problems.append('no workflow file in .github/workflows')
    for path in files:
        doc = yaml.safe_load(path.read_text())
        name = path.relative_to(ROOT)
        # PyYAML reads the key `on` as True (YAML 1.1).
        if not isinstance(doc, dict) or not ({'on', True} & doc.keys()):
            problems.append(f'{name}: no `on:` trigger')
            continue
        jobs = doc.get('jobs') or {}
        if not jobs:
            problems.append(f'{name}: no jobs')
        for job_id, job in jobs.items():
            if 'runs-on' not in job:
                problems.append(f'{name}: job {job_id} has no runs-on')
            for i, step in enumerate(job.get('steps') or []):
                if not ('run' in step) ^ ('uses' in step):
                    problems.append(f'{name}: {job_id} step {i}: needs '
                                    f'exactly one of run/uses')
                for target in make_targets_in(step.get('run', '')):
                    status = 'ok' if target in targets else 'MISSING'
                    print(f'{name}: job {job_id}: make {target}: {status}')
                    if target not in targets:
                        problems.append(f'{name}: job {job_id} runs `make '
                                        f'{target}`, not a Makefile target')
        if path.stem == 'ci':
            problems += reach_problems(name, jobs)
            problems += gpu_problems(name, jobs)
    for problem in problems:
        print(f'ERROR: {problem}', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
