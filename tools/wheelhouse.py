"""The wheelhouse of `make test-gpu` on an offline GPU node, and the
offline install from it.

A GPU node (a cluster's node, our GPU runner) has its own Python with
torch and numpy 2 preinstalled, and no network. `make wheelhouse`, on a
machine with a network, downloads everything else the GPU check needs, for
the node's Python version and platform: d2lpar's own wheel, its other
dependencies (matplotlib, psutil, ...) and the test tools (pytest,
pytest-xdist, nbval, nbclient, nbformat, ipykernel, hypothesis). Never
torch, numpy, triton or an NVIDIA/CUDA wheel: the node's own are used, and
the folder stays small enough to copy (MAX_MB).

Usage::

    NODE_PYTHON tools/wheelhouse.py venv build/gpu-venv-py3.12
        # a venv that sees the node's packages (its torch and numpy)
    python3 tools/wheelhouse.py build --python-version 3.12 \\
        --dest build/wheelhouse-py3.12            # needs the network
    python3 tools/wheelhouse.py check build/wheelhouse-py3.12
    VENV/bin/python tools/wheelhouse.py install [--wheelhouse DIR]
        # offline: pip install --no-index --find-links DIR (without DIR:
        # from the index, this checkout's d2lpar); torch and numpy must be
        # the same before and after

Stdlib only (and pip).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_MB = 60            # megabytes, 10**6 bytes
# What the node brings, and what must never be in the wheelhouse
FORBIDDEN = re.compile(r'^(torch|torchvision|torchaudio|triton|pytorch-triton'
                       r'(-.*)?|numpy|nvidia(-.*)?|cuda(-.*)?)$')
KEPT = ('torch', 'numpy')   # checked before and after the install
# The test extra's tools that tests/gpu and the lessons need (nbconvert,
# playwright, babel, pyyaml serve other tests)
GPU_TOOLS = ('pytest', 'pytest-xdist', 'nbval', 'nbclient', 'nbformat',
             'ipykernel', 'hypothesis')
# manylinux tags a Linux x86-64 node with glibc 2.28 or later accepts
# (pip does not widen a --platform given by hand)
PLATFORMS = tuple(f'manylinux_2_{minor}_x86_64' for minor in
                  range(28, 16, -1)) + (
    'manylinux2014_x86_64', 'manylinux2010_x86_64', 'manylinux1_x86_64')


def canonical(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def requirement_name(requirement):
    return canonical(re.match(r'\s*([A-Za-z0-9._-]+)', requirement)[1])


def wheel_name(filename):
    """The canonical project name of a wheel's file name."""
    return canonical(pathlib.Path(filename).name.split('-')[0])


def for_python(filename, python_version):
    """Whether the wheel `filename` installs on CPython `python_version`:
    pure Python (py3), built for it (cp312), or the stable ABI (abi3) of
    an older CPython 3."""
    python_tags, abi, _ = filename[:-len('.whl')].split('-')[-3:]
    minor = int(python_version.split('.')[1])
    for tag in python_tags.split('.'):
        if tag in ('py3', f'cp3{minor}'):
            return True
        m = re.fullmatch(r'cp3(\d+)', tag)
        if m and abi == 'abi3' and int(m[1]) <= minor:
            return True
    return False


def requirements(pyproject=ROOT / 'pyproject.toml'):
    """d2lpar's dependencies but torch and numpy, and GPU_TOOLS, with the
    ranges of pyproject.toml (the one place they are written)."""
    project = tomllib.loads(pathlib.Path(pyproject).read_text())['project']
    found = [r for r in project['dependencies']
             if not FORBIDDEN.match(requirement_name(r))]
    tools = {requirement_name(r): r
             for r in project['optional-dependencies']['test']}
    missing = [t for t in GPU_TOOLS if t not in tools]
    if missing:
        sys.exit(f'wheelhouse: {missing} not in the test extra of '
                 f'pyproject.toml')
    return found + [tools[t] for t in GPU_TOOLS]


def problems(folder, max_mb=MAX_MB, python_version=None):
    """What is wrong with the wheelhouse `folder`: a forbidden wheel (torch,
    numpy, NVIDIA, ...), a file that is not a wheel (an sdist would need a
    build on the node), a wheel for another Python, d2lpar's wheel or a
    tool missing, or more than `max_mb` megabytes."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        return [f'{folder} is not a folder: run make wheelhouse']
    found = []
    files = sorted(p for p in folder.iterdir() if p.is_file()
                   and p.name != 'wheelhouse.json')
    wheels = [p for p in files if p.suffix == '.whl']
    for p in files:
        if p.suffix != '.whl':
            found.append(f'{p.name}: not a wheel (the node cannot build it)')
    for p in wheels:
        if FORBIDDEN.match(wheel_name(p.name)):
            found.append(f'{p.name}: torch, numpy and the NVIDIA/CUDA '
                         f'wheels come with the node, never from the '
                         f'wheelhouse')
        if python_version and not for_python(p.name, python_version):
            found.append(f'{p.name}: not for Python {python_version}')
    names = {wheel_name(p.name) for p in wheels}
    for needed in ['d2lpar'] + [requirement_name(r) for r in requirements()]:
        if needed not in names:
            found.append(f'no wheel of {needed}')
    size = sum(p.stat().st_size for p in files)
    if size > max_mb * 10**6:
        found.append(f'{size / 1e6:.1f} MB, more than the {max_mb} MB '
                     f'allowed: look for a large wheel that has no place '
                     f'here (ls -lS {folder})')
    return found


def summary(folder):
    files = [p for p in pathlib.Path(folder).iterdir()
             if p.suffix == '.whl']
    size = sum(p.stat().st_size for p in files)
    return f'{folder}: {len(files)} wheels, {size / 1e6:.1f} MB'


def target_options(python_version, platforms):
    nodot = python_version.replace('.', '')
    options = ['--only-binary=:all:', '--python-version', python_version,
               '--implementation', 'cp', '--abi', f'cp{nodot}',
               '--abi', 'abi3', '--abi', 'none']
    for platform in platforms:
        options += ['--platform', platform]
    return options


def build(dest, python_version, platforms=PLATFORMS, max_mb=MAX_MB):
    dest = pathlib.Path(dest)
    here = '%d.%d' % sys.version_info[:2]
    if here != python_version:
        print(f'wheelhouse: note: pip evaluates the markers of the '
              f'requirements for this Python ({here}), not for '
              f'{python_version}: build with a Python {python_version} '
              f'(PYTHON=python{python_version}) when you can')
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    pip = [sys.executable, '-m', 'pip']
    reqs = requirements()
    target = target_options(python_version, platforms)
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / 'report.json'
        # Resolve for the node's Python and platform without installing
        # (pip reads the metadata, not the wheels); torch is never asked
        # for, numpy (matplotlib's) is dropped below.
        subprocess.run(pip + ['install', '--quiet', '--dry-run',
                              '--ignore-installed', '--target',
                              str(pathlib.Path(tmp) / 'target'),
                              '--report', str(report)] + target + reqs,
                       check=True)
        chosen = [(item['metadata']['name'], item['metadata']['version'])
                  for item in json.loads(report.read_text())['install']]
    keep = [f'{name}=={version}' for name, version in chosen
            if not FORBIDDEN.match(canonical(name))]
    dropped = sorted(f'{n}=={v}' for n, v in chosen
                     if FORBIDDEN.match(canonical(n)))
    print(f'wheelhouse: {len(keep)} wheels for Python {python_version} '
          f'(left to the node: {", ".join(dropped) or "nothing"})')
    subprocess.run(pip + ['download', '--quiet', '--no-deps', '--dest',
                          str(dest)] + target + keep, check=True)
    subprocess.run(pip + ['wheel', '--quiet', '--no-deps', '--wheel-dir',
                          str(dest), str(ROOT)], check=True)
    (dest / 'wheelhouse.json').write_text(json.dumps(
        {'python_version': python_version, 'platforms': list(platforms),
         'requirements': reqs, 'left_to_the_node': dropped}, indent=1))
    return problems(dest, max_mb, python_version)


def versions(names=KEPT):
    """{'torch': '2.14.1', 'numpy': '2.5.5'} of this Python (None when
    missing), read without importing them."""
    from importlib import metadata
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def make_venv(dest):
    """A venv at `dest` that sees this Python's packages (the node's torch
    and numpy): --system-site-packages, and, when this Python is itself a
    venv (whose packages --system-site-packages does not reach), a .pth
    file that adds its site-packages after the new venv's own."""
    import site
    import venv
    dest = pathlib.Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    try:
        import ensurepip  # noqa: F401 (Debian's python3 may lack it)
        with_pip = True
    except ImportError:
        with_pip = False  # then the node's pip, seen through the venv
    venv.EnvBuilder(system_site_packages=True, with_pip=with_pip,
                    symlinks=os.name != 'nt').create(dest)
    if sys.prefix != sys.base_prefix:
        py = dest / ('Scripts' if os.name == 'nt' else 'bin') / 'python'
        purelib = subprocess.run(
            [str(py), '-c', 'import sysconfig; '
             'print(sysconfig.get_paths()["purelib"])'],
            capture_output=True, text=True, check=True).stdout.strip()
        (pathlib.Path(purelib) / '_node_packages.pth').write_text(
            '\n'.join(site.getsitepackages()) + '\n')
    print(f'wheelhouse: {dest} sees the packages of {sys.executable}')


def install_command(wheelhouse=None, python=None):
    """pip's install of d2lpar and the GPU tools: from `wheelhouse`
    offline (no index at all, the wheelhouse the only place to look, only
    wheels), else from the index, with this checkout's d2lpar. Never an
    upgrade of what is installed (the node's torch and numpy)."""
    pip = [python or sys.executable, '-m', 'pip', 'install', '--quiet',
           '--disable-pip-version-check']
    if wheelhouse is None:
        return pip + [str(ROOT)] + requirements()
    return pip + ['--no-index', '--find-links', str(wheelhouse),
                  '--only-binary=:all:', 'd2lpar'] + requirements()


def stale_files():
    """The modules of the installed d2lpar that differ from this
    checkout's (a wheelhouse built from another commit)."""
    from importlib import metadata
    differ = []
    for f in metadata.files('d2lpar') or []:
        if f.suffix == '.py' and f.parts[0] == 'd2lpar':
            mine = ROOT / pathlib.Path(*f.parts)
            if not mine.exists() or \
                    mine.read_bytes() != f.locate().read_bytes():
                differ.append(str(pathlib.Path(*f.parts)))
    return differ


def install(wheelhouse=None):
    if wheelhouse is not None:
        found = problems(wheelhouse,
                         python_version='%d.%d' % sys.version_info[:2])
        if found:
            sys.exit('wheelhouse: ' + '\n  '.join([str(wheelhouse)]
                                                  + found))
    before = versions()
    print(f'wheelhouse: before: {before}')
    if None in before.values():
        sys.exit(f'wheelhouse: this Python ({sys.executable}) sees no '
                 f'{[k for k, v in before.items() if v is None]}: make '
                 f'test-gpu PYTHON= must name the node\'s Python that has '
                 f'torch and numpy')
    env = dict(os.environ)
    if wheelhouse is not None:
        env['PIP_NO_INDEX'] = '1'
    command = install_command(wheelhouse)
    print('wheelhouse: ' + ' '.join(command[1:]), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env)
    after = versions()
    print(f'wheelhouse: after: {after} ({time.perf_counter() - start:.0f} s)')
    if after != before:
        sys.exit(f'wheelhouse: the install changed torch or numpy: '
                 f'{before} -> {after}')
    stale = stale_files()
    if stale:
        sys.exit(f'wheelhouse: the d2lpar wheel of {wheelhouse} is not '
                 f'this checkout\'s ({", ".join(stale[:5])} differ): run '
                 f'make wheelhouse again and copy it')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    b = sub.add_parser('build')
    b.add_argument('--python-version', required=True)
    b.add_argument('--dest', required=True)
    b.add_argument('--platform', action='append')
    b.add_argument('--max-mb', type=float, default=MAX_MB)
    c = sub.add_parser('check')
    c.add_argument('folder')
    c.add_argument('--python-version')
    c.add_argument('--max-mb', type=float, default=MAX_MB)
    i = sub.add_parser('install')
    i.add_argument('--wheelhouse')
    v = sub.add_parser('venv')
    v.add_argument('dest')
    args = parser.parse_args(argv)
    if args.command == 'install':
        install(args.wheelhouse)
        return 0
    if args.command == 'venv':
        make_venv(args.dest)
        return 0
    if args.command == 'build':
        found = build(args.dest, args.python_version,
                      tuple(args.platform or PLATFORMS), args.max_mb)
        folder = args.dest
    else:
        found = problems(args.folder, args.max_mb, args.python_version)
        folder = args.folder
    if pathlib.Path(folder).is_dir():
        print(f'wheelhouse: {summary(folder)} (at most {args.max_mb:g} MB)')
    for problem in found:
        print(f'ERROR: wheelhouse: {problem}', file=sys.stderr)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
