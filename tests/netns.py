"""Two hosts on this machine: two network namespaces, each with an
address of its own, joined only to each other by a veth pair (no route to
anything else). The addresses come from 192.0.2.0/24, which RFC 5737
reserves for documentation: no network routes it."""
import os
import shutil
import signal
import subprocess
import sys
import uuid

ADDRESSES = ('192.0.2.1', '192.0.2.2')


def why_not():
    """None where two hosts can be made here, else why not."""
    if not sys.platform.startswith('linux'):
        return 'network namespaces exist on Linux only'
    if os.geteuid() != 0:
        return 'making network namespaces needs root'
    for tool, package in (('ip', 'iproute2'), ('ss', 'iproute2')):
        if shutil.which(tool) is None:
            return (f"the command '{tool}' is missing (Debian: apt-get "
                    f"install {package})")
    return None


def _ip(*args):
    subprocess.run(['ip', *args], check=True, capture_output=True,
                   text=True, timeout=30)


class TwoHosts:
    """``with TwoHosts() as hosts``: hosts.addresses[i] is host i's
    address. Leaving the block kills every process in the namespaces and
    removes them (the veth pair goes with them), also after an error."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.namespaces = [f'd2lpar-{tag}-{i}' for i in range(2)]
        self.links = [f'd2l{tag}v{i}' for i in range(2)]  # 15 chars at most
        self.addresses = ADDRESSES
        self.procs = []

    def __enter__(self):
        try:
            for ns in self.namespaces:
                _ip('netns', 'add', ns)
            _ip('link', 'add', self.links[0], 'type', 'veth', 'peer', 'name',
                self.links[1])
            for ns, link, address in zip(self.namespaces, self.links,
                                         self.addresses):
                _ip('link', 'set', link, 'netns', ns)
                _ip('-n', ns, 'addr', 'add', f'{address}/24', 'dev', link)
                _ip('-n', ns, 'link', 'set', 'lo', 'up')
                _ip('-n', ns, 'link', 'set', link, 'up')
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc_info):
        self.remove()

    def start(self, i, script, cwd, env, log):
        """Run the bash `script` on host `i`, its output to the file
        `log`; returns the Popen."""
        with open(log, 'w') as out:
            proc = subprocess.Popen(
                ['ip', 'netns', 'exec', self.namespaces[i], 'bash', '-c',
                 script], cwd=cwd, env=env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def pids(self, i):
        """The processes running on host `i`."""
        out = subprocess.run(['ip', 'netns', 'pids', self.namespaces[i]],
                             capture_output=True, text=True, timeout=30)
        return [int(p) for p in out.stdout.split()]

    def listening(self, i):
        """{(protocol, local address, program)} of the sockets that listen
        (TCP) or are bound (UDP) on host `i`."""
        out = subprocess.run(
            ['ip', 'netns', 'exec', self.namespaces[i], 'ss', '-tulnpH'],
            capture_output=True, text=True, timeout=30).stdout
        found = set()
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 5:
                continue
            program = line.split('(("', 1)[1].split('"', 1)[0] \
                if '(("' in line else '?'
            found.add((fields[0], fields[4], program))
        return found

    def set_link(self, up):
        """Bring the link between the hosts up or down (host 1's end)."""
        _ip('-n', self.namespaces[1], 'link', 'set', self.links[1],
            'up' if up else 'down')

    def remove(self):
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        for i, ns in enumerate(self.namespaces):
            try:
                for pid in self.pids(i):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            except (OSError, subprocess.SubprocessError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.namespaces:
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True,
                           timeout=30)
