"""Check .github/workflows/*.yml: valid YAML with jobs and steps, and every
`make <target>` a step runs is a target of the Makefile.

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
    found = []
    for line in command.splitlines():
        for part in re.split(r'&&|\|\||;', line):
            words = shlex.split(part, comments=True)
            if words and words[0] == 'make':
                found += [w for w in words[1:]
                          if not w.startswith('-') and '=' not in w]
    return found


def main():
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
    for problem in problems:
        print(f'ERROR: {problem}', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
